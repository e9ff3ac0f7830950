// The victim server (victim_server.c) as a child process under iwemu-run:
// started on a port, its stdout read line by line with time limits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace iwemu::robustness {

class VictimProcess {
public:
    // argv: the command, e.g. {iwemu-run, victim_server, PORT}.
    explicit VictimProcess(std::vector<std::string> argv);
    ~VictimProcess();
    VictimProcess(const VictimProcess&) = delete;
    VictimProcess& operator=(const VictimProcess&) = delete;

    bool start(std::string* error);
    // True while the child has not exited (a crash shows up here).
    bool alive();
    // Exit status text when it has exited ("exit 0", "signal 11").
    std::string status() const { return status_; }
    // SIGTERM, wait up to 5 s (then SIGKILL); true if it exited with 0.
    bool stop();

    // Read what the victim printed so far (waits up to `wait` for more).
    void pump(std::chrono::milliseconds wait);
    // First line at or after `from` containing every one of `needles`,
    // waiting up to `timeout` for it.  Returns its index.
    std::optional<size_t> wait_for(const std::vector<std::string>& needles, std::chrono::milliseconds timeout,
                                   size_t from = 0);
    // Lines mentioning connection `serial` (token "conn=N").
    std::vector<std::string> lines_of(int serial) const;
    const std::vector<std::string>& lines() const { return lines_; }

private:
    std::vector<std::string> argv_;
    pid_t pid_ = -1;
    int out_fd_ = -1;
    std::string partial_;
    std::vector<std::string> lines_;
    std::string status_;
};

// "conn=N" appears in `line` as a whole token.
bool mentions_conn(const std::string& line, int serial);

}  // namespace iwemu::robustness
