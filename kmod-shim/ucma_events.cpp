#include "kmod-shim/ucma_events.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace iwemu::shim {

std::shared_ptr<UcmaFile> ucma_file_create(int open_flags) {
    int flags = 0;  // blocking or not is the application's choice (fcntl later too)
    if (open_flags & O_CLOEXEC) flags |= EFD_CLOEXEC;
    if (open_flags & O_NONBLOCK) flags |= EFD_NONBLOCK;
    int fd = ::eventfd(0, flags);
    if (fd < 0) return nullptr;
    int wait_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (wait_fd < 0) {
        int err = errno;
        ::close(fd);
        errno = err;
        return nullptr;
    }
    auto file = std::make_shared<UcmaFile>();
    file->fd = fd;
    file->wait_fd = wait_fd;
    return file;
}

UcmaFile::~UcmaFile() {
    if (wait_fd >= 0) ::close(wait_fd);
}

void UcmaFile::set_ready(bool ready) {
    if (ready == ready_) return;
    ready_ = ready;
    if (ready) {
        uint64_t one = 1;
        (void)!::write(wait_fd, &one, sizeof one);
    } else {
        // The counter is known to be non-zero, so this read never blocks even
        // if the application made the (shared) file description blocking.
        uint64_t value;
        (void)!::read(wait_fd, &value, sizeof value);
    }
}

void UcmaFile::push(const UcmaEvent& ev) {
    if (closed) return;
    events.push_back(ev);
    set_ready(true);
}

bool UcmaFile::pop(UcmaEvent* ev) {
    if (events.empty()) return false;
    *ev = events.front();
    events.pop_front();
    if (events.empty() && !closed) set_ready(false);
    return true;
}

std::deque<UcmaEvent> UcmaFile::take_events_of(uint32_t handle) {
    std::deque<UcmaEvent> taken, kept;
    for (auto& ev : events) (ev.handle == handle ? taken : kept).push_back(ev);
    events.swap(kept);
    if (events.empty() && !closed) set_ready(false);
    return taken;
}

void UcmaFile::shut() {
    // Waiters stay blocked, as in the kernel, where a thread sleeping in
    // GET_EVENT holds the file open past close(): rping's CM thread does
    // exactly that at exit and must not see an error.
    closed = true;
}

int ucma_file_wait(const UcmaFile& file) {
    if (file.closed) {  // read without the lock: at worst one more loop
        ::poll(nullptr, 0, -1);  // sleeps until a signal
        return -EINTR;
    }
    pollfd pfd{file.wait_fd, POLLIN, 0};
    for (;;) {
        int n = ::poll(&pfd, 1, -1);
        if (n > 0) return 0;
        if (n < 0 && errno == EINTR) return -EINTR;  // like wait_event_interruptible
        if (n < 0) return -errno;
    }
}

}  // namespace iwemu::shim
