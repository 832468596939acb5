// Threads for the greedy passes over huge traces (docs/strategies.md §2):
// a fixed set that runs one job on every thread at once. Results never depend
// on the number of threads; only the wall time does.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <thread>
#include <vector>

namespace emel::memory {

// The whole decimal value of environment variable `name` when it is set to
// one in [lo, hi]; nothing otherwise.
std::optional<uint64_t> env_count(const char* name, uint64_t lo, uint64_t hi);

// How many threads a pass may use: EMEL_THREADS when set to 1..64, else the
// machine's hardware threads, at most 8.
unsigned placement_threads();

// Runs fn() on a new thread with a stack of `stack_bytes` and waits for it,
// rethrowing what it raised; false (fn not run) when the system refuses the
// thread. For recursions deeper than a caller's stack may allow.
bool run_on_stack(size_t stack_bytes, const std::function<void()>& fn);

class WorkerPool {
  public:
    // `threads` counts the caller. Threads the system refuses to start are
    // done without: the pool may be smaller than asked, never broken.
    // `stack_bytes` (0: the system's default) sizes each worker's stack.
    explicit WorkerPool(unsigned threads, size_t stack_bytes = 0);
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }
    // Runs job(t) for every t in [0, size()) at once, t = 0 on the caller;
    // returns when all are done, rethrowing the first exception any raised.
    void run(const std::function<void(unsigned)>& job);

  private:
    void serve(unsigned t);
    std::vector<pthread_t> workers_;
    std::mutex mutex_;
    std::condition_variable start_, done_;
    const std::function<void(unsigned)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};
    std::atomic<unsigned> pending_{0};
    bool stop_ = false;
    std::exception_ptr error_;
};

// Lowers `a` to `v` where v is smaller (a race's earliest settle so far).
inline void lower_to(std::atomic<uint64_t>& a, uint64_t v) {
    uint64_t seen = a.load();
    while (v < seen && !a.compare_exchange_weak(seen, v)) {
    }
}

// job(0) and job(1) at once, job(0) on the caller, where `at_once` and two
// threads can be had; else one after the other on the caller. For two
// searches or passes whose results are then taken in a fixed order.
inline void run_two(const std::function<void(unsigned)>& job, bool at_once = true) {
    if (at_once && placement_threads() >= 2) {
        WorkerPool pool(2);
        if (pool.size() == 2) {
            pool.run(job);
            return;
        }
    }
    job(0);
    job(1);
}

// fn(from, to) over [0, n) cut in one range per thread of `pool` (null: the
// whole range on the caller). For loops whose steps write apart.
template <class Fn>
void in_ranges(WorkerPool* pool, size_t n, Fn fn) {
    if (!pool || pool->size() < 2) {
        fn(size_t{0}, n);
        return;
    }
    const size_t parts = pool->size();
    pool->run([&](unsigned t) { fn(n * t / parts, n * (t + 1) / parts); });
}

// Sorts [first, last) by `less`, a strict total order (so the result is the
// one std::sort gives, however it is split): from kSortOnThreadsFrom
// elements, in one part per placement thread, sorted at once, then merged.
constexpr size_t kSortOnThreadsFrom = size_t{1} << 16;

template <class Iter, class Less>
void sort_on_threads(Iter first, Iter last, Less less) {
    const size_t n = static_cast<size_t>(last - first);
    const unsigned threads = n >= kSortOnThreadsFrom ? placement_threads() : 1;
    if (threads < 2) {
        std::sort(first, last, less);
        return;
    }
    WorkerPool pool(threads);
    const size_t parts = pool.size();
    auto bound = [&](size_t k) { return first + static_cast<std::ptrdiff_t>(n * k / parts); };
    pool.run([&](unsigned t) { std::sort(bound(t), bound(t + 1), less); });
    for (size_t width = 1; width < parts; width *= 2)
        for (size_t k = 0; k + width < parts; k += 2 * width)
            std::inplace_merge(bound(k), bound(k + width), bound(std::min(parts, k + 2 * width)), less);
}

}  // namespace emel::memory
