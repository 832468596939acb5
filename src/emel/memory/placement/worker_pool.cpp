#include "emel/memory/placement/worker_pool.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <system_error>

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

WorkerPool::WorkerPool(unsigned threads) {
    for (unsigned t = 1; t < threads; ++t) {
        try {
            workers_.emplace_back([this, t] { serve(t); });
        } catch (const std::system_error&) {
            break;  // e.g. a process limit on threads: carry on with fewer
        }
    }
}

WorkerPool::~WorkerPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
}

void WorkerPool::serve(unsigned t) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        const auto* job = job_;
        lock.unlock();
        std::exception_ptr error;
        try {
            (*job)(t);
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        if (error && !error_) error_ = error;
        if (--pending_ == 0) done_.notify_one();
    }
}

void WorkerPool::run(const std::function<void(unsigned)>& job) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &job;
        pending_ = static_cast<unsigned>(workers_.size());
        ++generation_;
    }
    start_.notify_all();
    std::exception_ptr error;
    try {
        job(0);
    } catch (...) {
        error = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    if (!error) error = error_;
    error_ = nullptr;
    if (error) std::rethrow_exception(error);
}

}  // namespace emel::memory
