// Completion channels, the user-space stand-in for the kernel's
// ib_uverbs_completion_event_file.  A channel is a pipe: the application
// gets the read end (8-byte ib_uverbs_comp_event_desc records, written whole
// and read whole by ibv_get_cq_event; real poll/epoll readiness, O_NONBLOCK
// honoured by the kernel) and the shim keeps the write end.  The provider
// obtains its own duplicate of the write end per channel through
// iwemu_shim_comp_channel_sender(), so no state is shared across the two
// libraries beyond that fd.
#pragma once

#include <sys/types.h>

namespace iwemu::shim {

// Creates a channel; returns the application's fd or -1 with errno set.
int comp_channel_create();

// The application closed the read end: drop our write end.
void comp_channel_close(int fd);

// read() of a channel's read end.  A blocking read with nothing queued
// first lets the emulator receive in this thread until an event is there
// (Emulator::wait_channel): one this thread produced is returned directly,
// any other is read through `real_read`.
ssize_t comp_channel_read(int fd, void* buf, size_t len, ssize_t (*real_read)(int, void*, size_t));

}  // namespace iwemu::shim

extern "C" {
// Returns a new fd (O_CLOEXEC) for posting events on the channel whose read
// end is channel_fd, or -1 with errno EINVAL if channel_fd is not a channel.
// Looked up by the provider with dlsym(RTLD_DEFAULT, ...).
int iwemu_shim_comp_channel_sender(int channel_fd);
}
