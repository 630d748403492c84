// Framed messages of the device server's protocol (protocol.h) over a connected
// Unix-domain stream socket, with file descriptors passed as SCM_RIGHTS. Shared by the device
// server (server/) and the driver's socket backend (backends/socket/).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "mtia/isa/result.h"
#include "mtia/wire/protocol.h"

namespace mtia::wire {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Message {
  MessageHeader header;
  std::vector<uint8_t> payload;
  UniqueFd fd;  // the descriptor sent with it (header.flags has kMessageCarriesFd)
};

// The header of a message with `payload_bytes` of payload (and a descriptor if `carries_fd`).
MessageHeader message_header(MessageType type, uint64_t request_id, uint64_t payload_bytes,
                             bool carries_fd);

// One sendmsg() of `iov` (MSG_NOSIGNAL and `flags`, e.g. MSG_DONTWAIT), with `fd` attached to
// its first byte when fd >= 0; retried on EINTR. The bytes sent, or -1 with errno set.
ssize_t send_bytes(int socket, const iovec* iov, int n_iov, int fd, int flags);

// Sends one whole message: header, payload and, if `fd` >= 0, that descriptor. Waits while the
// socket's buffer is full, at most `timeout_ms` in all (a peer that stops reading is dead to
// us). kDeviceLost when the peer has gone or the timeout passed. Callers that share a socket
// serialize their sends.
isa::Status send_message(int socket, MessageType type, uint64_t request_id, const void* payload,
                         uint64_t payload_bytes, int fd = -1, int timeout_ms = 10000);

// Collects bytes and descriptors from a socket and cuts them into messages.
class MessageReader {
 public:
  // What one read brought.
  enum class ReadState { kData, kWouldBlock, kClosed };
  // One recvmsg() on `socket` (blocking or not, as the socket is). kClosed at end of stream;
  // a failure for a socket error or truncated ancillary data.
  isa::Result<ReadState> read_some(int socket);
  // The next complete message, nullopt if more bytes are needed; kInvalidArgument naming what is
  // malformed (the connection cannot be trusted past it).
  isa::Result<std::optional<Message>> next();
  // Bytes received that are not a complete message yet.
  uint64_t buffered() const { return buf_.size() - at_; }

 private:
  std::vector<uint8_t> buf_;
  uint64_t at_ = 0;  // start of the first unconsumed byte
  std::deque<UniqueFd> fds_;
};

}  // namespace mtia::wire
