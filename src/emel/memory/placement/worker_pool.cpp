#include "emel/memory/placement/worker_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>

namespace emel::memory {

std::optional<uint64_t> env_count(const char* name, uint64_t lo, uint64_t hi) {
    const char* text = std::getenv(name);
    if (!text) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long long asked = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || asked < 0) return std::nullopt;
    const auto value = static_cast<uint64_t>(asked);
    if (value < lo || value > hi) return std::nullopt;
    return value;
}

unsigned placement_threads() {
    if (const auto asked = env_count("EMEL_THREADS", 1, 64)) return static_cast<unsigned>(*asked);
    return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

namespace {

// Starts fn on a new thread (with `stack_bytes` of stack unless 0); the
// thread owns fn. False when the system refuses it.
bool start_thread(size_t stack_bytes, std::function<void()>* fn, pthread_t& thread) {
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return false;
    bool ok = stack_bytes == 0 || pthread_attr_setstacksize(&attr, stack_bytes) == 0;
    auto body = [](void* arg) -> void* {
        std::unique_ptr<std::function<void()>> owned(static_cast<std::function<void()>*>(arg));
        (*owned)();
        return nullptr;
    };
    ok = ok && pthread_create(&thread, &attr, body, fn) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) delete fn;
    return ok;
}

}  // namespace

bool run_on_stack(size_t stack_bytes, const std::function<void()>& fn) {
    std::exception_ptr error;
    pthread_t thread;
    auto* body = new std::function<void()>([&] {
        try {
            fn();
        } catch (...) {
            error = std::current_exception();
        }
    });
    if (!start_thread(stack_bytes, body, thread)) return false;
    pthread_join(thread, nullptr);
    if (error) std::rethrow_exception(error);
    return true;
}

WorkerPool::WorkerPool(unsigned threads, size_t stack_bytes) {
    for (unsigned t = 1; t < threads; ++t) {
        pthread_t thread;
        // A refused thread (e.g. a process limit on threads): carry on with fewer.
        if (!start_thread(stack_bytes, new std::function<void()>([this, t] { serve(t); }), thread)) break;
        workers_.push_back(thread);
    }
}

WorkerPool::~WorkerPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    start_.notify_all();
    for (pthread_t w : workers_) pthread_join(w, nullptr);
}

namespace {

// Spins (for at most about kSpinMicroseconds) until done() holds; true if it
// did. Jobs come in quick succession (a greedy pass's batches, a few hundred
// microseconds apart): a thread that sleeps between them waits for the
// scheduler to wake it each time, which costs more than the spin.
constexpr int64_t kSpinMicroseconds = 200;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

template <class Done>
bool spin_until(Done done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicroseconds);
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (done()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() >= give_up) return false;
    }
}

}  // namespace

void WorkerPool::serve(unsigned t) {
    uint64_t seen = 0;
    for (;;) {
        if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
            std::unique_lock<std::mutex> lock(mutex_);
            start_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
        }
        const auto* job = [&] {
            std::lock_guard<std::mutex> lock(mutex_);
            return stop_ ? nullptr : job_;
        }();
        if (!job) return;
        seen = generation_.load();
        std::exception_ptr error;
        try {
            (*job)(t);
        } catch (...) {
            error = std::current_exception();
        }
        if (error) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = error;
        }
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);
            done_.notify_one();
        }
    }
}

void WorkerPool::run(const std::function<void(unsigned)>& job) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &job;
        pending_.store(static_cast<unsigned>(workers_.size()));
        generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    std::exception_ptr error;
    try {
        job(0);
    } catch (...) {
        error = std::current_exception();
    }
    if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [&] { return pending_.load() == 0; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error) error = error_;
    error_ = nullptr;
    if (error) std::rethrow_exception(error);
}

}  // namespace emel::memory
