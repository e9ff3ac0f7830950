#include "tests/robustness/victim_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace iwemu::robustness {

namespace {
std::string describe(int wstatus)
{
    if (WIFEXITED(wstatus)) return "exit " + std::to_string(WEXITSTATUS(wstatus));
    if (WIFSIGNALED(wstatus)) return "signal " + std::to_string(WTERMSIG(wstatus));
    return "unknown";
}
}  // namespace

bool mentions_conn(const std::string& line, int serial)
{
    const std::string token = "conn=" + std::to_string(serial);
    for (size_t at = line.find(token); at != std::string::npos; at = line.find(token, at + 1)) {
        const size_t end = at + token.size();
        if ((at == 0 || line[at - 1] == ' ') && (end == line.size() || line[end] == ' ')) return true;
    }
    return false;
}

VictimProcess::VictimProcess(std::vector<std::string> argv) : argv_(std::move(argv)) {}

VictimProcess::~VictimProcess()
{
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
}

bool VictimProcess::start(std::string* error)
{
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
        *error = std::string("pipe: ") + std::strerror(errno);
        return false;
    }
    pid_ = ::fork();
    if (pid_ < 0) {
        *error = std::string("fork: ") + std::strerror(errno);
        return false;
    }
    if (pid_ == 0) {
        ::dup2(p[1], STDOUT_FILENO);
        std::vector<char*> args;
        for (auto& a : argv_) args.push_back(a.data());
        args.push_back(nullptr);
        ::execvp(args[0], args.data());
        ::_exit(127);
    }
    ::close(p[1]);
    out_fd_ = p[0];
    ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
    return true;
}

bool VictimProcess::alive()
{
    if (pid_ <= 0) return false;
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
        status_ = describe(st);
        pid_ = -1;
        pump(std::chrono::milliseconds(0));
        return false;
    }
    return true;
}

bool VictimProcess::stop()
{
    if (pid_ <= 0) return status_ == "exit 0";
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 500; ++i) {
        int st = 0;
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
            status_ = describe(st);
            pid_ = -1;
            pump(std::chrono::milliseconds(0));
            return status_ == "exit 0";
        }
        pump(std::chrono::milliseconds(0));
        ::usleep(10000);  // pump() returns at once once the pipe is at EOF
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    status_ = "killed after SIGTERM timeout";
    return false;
}

void VictimProcess::pump(std::chrono::milliseconds wait)
{
    if (out_fd_ < 0) return;
    pollfd pf{out_fd_, POLLIN, 0};
    if (::poll(&pf, 1, static_cast<int>(wait.count())) <= 0) return;
    char buf[8192];
    for (;;) {
        const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
        if (n <= 0) return;
        partial_.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = partial_.find('\n')) != std::string::npos) {
            lines_.push_back(partial_.substr(0, nl));
            partial_.erase(0, nl + 1);
        }
    }
}

std::optional<size_t> VictimProcess::wait_for(const std::vector<std::string>& needles,
                                               std::chrono::milliseconds timeout, size_t from)
{
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t i = from;
    for (;;) {
        for (; i < lines_.size(); ++i) {
            bool all = true;
            for (const auto& n : needles) all = all && lines_[i].find(n) != std::string::npos;
            if (all) return i;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return std::nullopt;
        const size_t before = lines_.size();
        pump(std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                      std::chrono::milliseconds(50)));
        if (lines_.size() == before) ::usleep(5000);  // EOF: poll() no longer waits
    }
}

std::vector<std::string> VictimProcess::lines_of(int serial) const
{
    std::vector<std::string> out;
    for (const auto& l : lines_)
        if (mentions_conn(l, serial)) out.push_back(l);
    return out;
}

}  // namespace iwemu::robustness
