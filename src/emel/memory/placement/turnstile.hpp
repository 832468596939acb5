// Turns between the racing searches of the exact search (preorder_race.hpp),
// when there are fewer cores than searches.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>

namespace emel::memory::exact {

// Lets at most `permits` racing searches run at once, in turns: a search that
// has used its turn queues behind the ones waiting.
class Turnstile {
  public:
    explicit Turnstile(unsigned permits) : free_(permits) {}
    void enter(int who) {
        std::unique_lock<std::mutex> lock(mutex_);
        queue_.push_back(who);
        turn_.wait(lock, [&] { return free_ > 0 && queue_.front() == who; });
        queue_.pop_front();
        --free_;
        turn_.notify_all();  // the next in line may find a permit free too
    }
    void leave() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++free_;
        }
        turn_.notify_all();
    }
    void yield(int who) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (queue_.empty()) return;
        }
        leave();
        enter(who);
    }

  private:
    std::mutex mutex_;
    std::condition_variable turn_;
    std::deque<int> queue_;
    unsigned free_;
};

}  // namespace emel::memory::exact
