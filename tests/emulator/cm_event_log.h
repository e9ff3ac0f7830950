// Collects what a ConnectionManager reports to one handler, for tests that
// wait for a given event.  Every wait is bounded.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "emulator/cm/connection_manager.h"

namespace iwemu::test {

class CmEventLog {
public:
    static constexpr std::chrono::milliseconds default_limit{5000};

    cm::CmEventHandler handler()
    {
        return [this](const cm::CmEvent& ev) {
            std::lock_guard lock(mu_);
            events_.push_back(ev);
            cv_.notify_all();
        };
    }
    // First event of `type`, removed from the log.
    std::optional<cm::CmEvent> wait(cm::CmEventType type, std::chrono::milliseconds limit = default_limit)
    {
        std::unique_lock lock(mu_);
        std::optional<cm::CmEvent> out;
        cv_.wait_for(lock, limit, [&] {
            for (auto it = events_.begin(); it != events_.end(); ++it)
                if (it->type == type) {
                    out = *it;
                    events_.erase(it);
                    return true;
                }
            return false;
        });
        return out;
    }
    // Any event, removed from the log.
    std::optional<cm::CmEvent> next(std::chrono::milliseconds limit = default_limit)
    {
        std::unique_lock lock(mu_);
        if (!cv_.wait_for(lock, limit, [&] { return !events_.empty(); }))
            return std::nullopt;
        cm::CmEvent ev = events_.front();
        events_.pop_front();
        return ev;
    }
    size_t size()
    {
        std::lock_guard lock(mu_);
        return events_.size();
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<cm::CmEvent> events_;
};

}  // namespace iwemu::test
