#include "mtia/wire/message_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace mtia::wire {
namespace {

constexpr size_t kReadChunk = 256 * 1024;
constexpr size_t kMaxPendingFds = 16;  // more unclaimed descriptors than this is malformed
constexpr int kMaxFdsPerRead = 8;

isa::Failure lost(const std::string& why) {
  return isa::reject(isa::ErrorCode::kDeviceLost, why);
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

MessageHeader message_header(MessageType type, uint64_t request_id, uint64_t payload_bytes,
                             bool carries_fd) {
  MessageHeader h;
  h.type = type;
  h.flags = carries_fd ? kMessageCarriesFd : 0;
  h.request_id = request_id;
  h.payload_bytes = payload_bytes;
  return h;
}

ssize_t send_bytes(int socket, const iovec* iov, int n_iov, int fd, int flags) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n_iov);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = ::sendmsg(socket, &msg, flags | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

isa::Status send_message(int socket, MessageType type, uint64_t request_id, const void* payload,
                         uint64_t payload_bytes, int fd, int timeout_ms) {
  uint8_t header[kHeaderBytes];
  encode_header(message_header(type, request_id, payload_bytes, fd >= 0), header);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const auto* body = static_cast<const uint8_t*>(payload);
  uint64_t sent = 0;  // of header + payload
  const uint64_t total = kHeaderBytes + payload_bytes;
  bool fd_sent = fd < 0;
  while (sent < total) {
    iovec iov[2];
    int n_iov = 0;
    if (sent < kHeaderBytes) {
      iov[n_iov++] = {header + sent, static_cast<size_t>(kHeaderBytes - sent)};
      if (payload_bytes > 0) iov[n_iov++] = {const_cast<uint8_t*>(body), payload_bytes};
    } else {
      iov[n_iov++] = {const_cast<uint8_t*>(body) + (sent - kHeaderBytes),
                      static_cast<size_t>(total - sent)};
    }
    const ssize_t n = send_bytes(socket, iov, n_iov, fd_sent ? -1 : fd, 0);
    if (n > 0) {
      sent += static_cast<uint64_t>(n);
      fd_sent = true;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0)
        return lost("the peer stopped reading its socket for " + std::to_string(timeout_ms) +
                    " ms");
      pollfd p{socket, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(left));
      continue;
    }
    return lost(std::string("the connection closed: ") + std::strerror(n < 0 ? errno : EPIPE));
  }
  return {};
}

isa::Result<MessageReader::ReadState> MessageReader::read_some(int socket) {
  if (at_ > 0 && at_ == buf_.size()) {
    buf_.clear();
    at_ = 0;
  } else if (at_ > (1u << 20)) {  // compact now and then
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(at_));
    at_ = 0;
  }
  const size_t old = buf_.size();
  buf_.resize(old + kReadChunk);
  iovec iov{buf_.data() + old, kReadChunk};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerRead)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  buf_.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadState::kWouldBlock;
    return lost(std::string("reading the socket failed: ") + std::strerror(errno));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds_.emplace_back(fd);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds_.size() > kMaxPendingFds) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       "malformed server message: more file descriptors than messages that "
                       "carry them");
  }
  if (n == 0) return ReadState::kClosed;
  return ReadState::kData;
}

isa::Result<std::optional<Message>> MessageReader::next() {
  if (buffered() < kHeaderBytes) return std::optional<Message>();
  MTIA_ASSIGN_OR_RETURN(const MessageHeader h, decode_header(buf_.data() + at_));
  if (buffered() - kHeaderBytes < h.payload_bytes) return std::optional<Message>();
  Message m;
  m.header = h;
  const uint8_t* p = buf_.data() + at_ + kHeaderBytes;
  m.payload.assign(p, p + h.payload_bytes);
  at_ += kHeaderBytes + h.payload_bytes;
  if ((h.flags & kMessageCarriesFd) != 0) {
    if (fds_.empty()) {
      return isa::reject(
          isa::ErrorCode::kInvalidArgument,
          "malformed server message: " + message_type_name(static_cast<uint16_t>(h.type)) +
              " says it carries a file descriptor, and none arrived");
    }
    m.fd = std::move(fds_.front());
    fds_.pop_front();
  }
  return std::optional<Message>(std::move(m));
}

}  // namespace mtia::wire
