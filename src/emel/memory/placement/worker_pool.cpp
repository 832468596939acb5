#include "emel/memory/placement/worker_pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <system_error>

namespace emel::memory {

unsigned placement_threads() {
    if (const char* text = std::getenv("EMEL_THREADS")) {
        char* end = nullptr;
        const long asked = std::strtol(text, &end, 10);
        if (end != text && *end == '\0' && asked >= 1 && asked <= 64) return static_cast<unsigned>(asked);
    }
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
