// A queue's access scope (isa/access_scope.h): the context and DRAM window a device server
// gives each client's queues. The firmware keeps it per queue, checks its own accesses against
// it, and hands it with every DMA job and launch.
#include <catch2/catch.hpp>

#include "cp_harness.h"
#include "mtia/isa/access_scope.h"

using namespace mtia;
using namespace mtia::firmware;
using namespace mtia::firmware::test;
namespace reg = isa::reg;

namespace {

// Queue 0's ring, completions and the fence area lie below kDataArea; the data area does not.
constexpr uint64_t kWindowBytes = kDataArea;
constexpr uint32_t kContext = 7;

void set_scope(Harness& h, uint32_t q, uint32_t context, uint64_t base, uint64_t bytes) {
  h.set_reg(reg::queue_reg(q, reg::kQueueContext), context);
  h.set_reg(reg::queue_reg(q, reg::kQueueWindowBase), base);
  h.set_reg(reg::queue_reg(q, reg::kQueueWindowBytes), bytes);
}

// Queue 0 in context kContext with window [0, kWindowBytes), enabled.
Harness& scoped(Harness& h) {
  set_scope(h, 0, kContext, 0, kWindowBytes);
  h.setup_queue(0);
  REQUIRE(h.state(0) == isa::QueueState::kRunning);
  return h;
}

void check_fault(Harness& h, uint64_t index, isa::ErrorCode code, uint64_t addr) {
  const isa::CompletionRecord r = h.record(0, index);
  CHECK(r.status == static_cast<uint16_t>(isa::CompletionStatus::kError));
  CHECK(r.error == static_cast<uint16_t>(code));
  CHECK(r.error_arg0 == addr);
  CHECK(h.state(0) == isa::QueueState::kError);
}

}  // namespace

TEST_CASE("a queue's scope is written while disabled, read back and kept across resets",
          "[firmware][scope]") {
  Harness h;
  set_scope(h, 2, 5, 0x1000, 0x7000);
  CHECK(h.qreg(2, reg::kQueueContext) == 5);
  CHECK(h.qreg(2, reg::kQueueWindowBase) == 0x1000);
  CHECK(h.qreg(2, reg::kQueueWindowBytes) == 0x7000);
  h.set_reg(reg::queue_reg(2, reg::kQueueControl), isa::kQueueReset);
  CHECK(h.qreg(2, reg::kQueueWindowBytes) == 0x7000);
  // Other queues are untouched: the default scope is the whole device.
  CHECK(h.qreg(3, reg::kQueueWindowBytes) == 0);

  scoped(h);
  auto refused = h.cp.write_register(reg::queue_reg(0, reg::kQueueWindowBytes), 0);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == isa::ErrorCode::kBadQueueConfig);
  CHECK(contains(refused.error().reason, "disabled"));
  CHECK(h.qreg(0, reg::kQueueWindowBytes) == kWindowBytes);

  auto wide = h.cp.write_register(reg::queue_reg(1, reg::kQueueContext), uint64_t{1} << 32);
  REQUIRE_FALSE(wide.ok());
  CHECK(contains(wide.error().reason, "32-bit"));
}

TEST_CASE("a queue whose rings lie outside its window does not start", "[firmware][scope]") {
  Harness h;
  set_scope(h, 0, kContext, kCompletionArea, kWindowBytes - kCompletionArea);  // ring outside
  h.set_reg(reg::queue_reg(0, reg::kQueueBase), ring_addr(0));
  h.set_reg(reg::queue_reg(0, reg::kQueueSize), 8);
  h.set_reg(reg::queue_reg(0, reg::kQueueCompletion), completion_addr(0));
  auto enabled = h.cp.write_register(reg::queue_reg(0, reg::kQueueControl), isa::kQueueEnable);
  REQUIRE_FALSE(enabled.ok());
  CHECK(contains(enabled.error().reason, "inside its window"));
  CHECK(h.state(0) == isa::QueueState::kDisabled);

  Harness wrapping;
  set_scope(wrapping, 0, kContext, ~uint64_t{0} - 10, 100);
  wrapping.set_reg(reg::queue_reg(0, reg::kQueueBase), ring_addr(0));
  wrapping.set_reg(reg::queue_reg(0, reg::kQueueSize), 8);
  wrapping.set_reg(reg::queue_reg(0, reg::kQueueCompletion), completion_addr(0));
  auto bad = wrapping.cp.write_register(reg::queue_reg(0, reg::kQueueControl), isa::kQueueEnable);
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.error().reason, "past the end"));
}

TEST_CASE("DMA jobs and launches carry their queue's scope", "[firmware][scope]") {
  Harness h;
  scoped(h);
  h.submit(0, fill_bytes(1, kFenceArea, 64, 0xAB));
  h.submit(0, launch(2, kFenceArea));
  h.run();
  REQUIRE(h.platform.started.size() == 1);
  const isa::AccessScope& job = h.platform.started[0].job.scope;
  CHECK(job.context == kContext);
  CHECK(job.window_base == 0);
  CHECK(job.window_bytes == kWindowBytes);
  h.finish_dma(0);
  h.run();
  REQUIRE(h.platform.launch_scopes.size() == 1);
  CHECK(h.platform.launch_scopes[0].context == kContext);
  CHECK(h.platform.launch_scopes[0].window_bytes == kWindowBytes);

  // A queue left alone reaches everything (context 0, no window).
  Harness open;
  open.setup_queue(0);
  open.submit(0, fill_bytes(1, kDataArea, 64, 0xAB));
  open.run();
  REQUIRE(open.platform.started.size() == 1);
  CHECK_FALSE(open.platform.started[0].job.scope.restricted());
  CHECK(open.platform.started[0].job.scope.context == 0);
}

TEST_CASE("signals, waits and command buffers outside the window fault for that queue only",
          "[firmware][scope]") {
  SECTION("a signal to device memory") {
    Harness h;
    scoped(h);
    h.setup_queue(1);  // another queue, unrestricted, goes on
    h.submit(0, signal(1, kDataArea, 42));
    h.run();
    check_fault(h, 0, isa::ErrorCode::kDeviceAddressFault, kDataArea);
    CHECK(h.platform.device[kDataArea] == 0);  // nothing was written
    h.submit(1, signal(1, kDataArea, 42));
    h.run();
    CHECK(h.record(1, 0).status == static_cast<uint16_t>(isa::CompletionStatus::kOk));
    CHECK(h.platform.device[kDataArea] == 42);
  }
  SECTION("a signal inside the window works") {
    Harness h;
    scoped(h);
    h.submit(0, signal(1, kFenceArea, 9));
    h.run();
    CHECK(h.record(0, 0).status == static_cast<uint16_t>(isa::CompletionStatus::kOk));
    CHECK(h.platform.device[kFenceArea] == 9);
  }
  SECTION("a signal to host memory goes in the queue's context") {
    Harness h;
    scoped(h);
    h.submit(0, signal(1, FakePlatform::kHostBase, 3, isa::AddressSpace::kHost));
    h.run();
    REQUIRE(h.platform.host_write_contexts.size() == 1);
    CHECK(h.platform.host_write_contexts[0] == kContext);
  }
  SECTION("a wait on a fence outside the window") {
    Harness h;
    scoped(h);
    h.submit(0, wait(1, kDataArea, 1));
    h.run();
    check_fault(h, 0, isa::ErrorCode::kDeviceAddressFault, kDataArea);
  }
  SECTION("a command buffer outside the window") {
    Harness h;
    scoped(h);
    isa::ExecBufferPacket p{};
    p.header = header(isa::Opcode::kExecBuffer, 1);
    p.buffer_addr = kDataArea;
    p.packet_count = 1;
    h.submit(0, p);
    h.run();
    check_fault(h, 0, isa::ErrorCode::kDeviceAddressFault, kDataArea);
  }
}
