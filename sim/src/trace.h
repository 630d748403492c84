// Chrome trace-event recorder (ui.perfetto.dev and chrome://tracing open the output).
//
// One process per device; one track (thread id) per unit: the command processor, each queue,
// each DMA engine. Events are complete ("X") slices in simulated time. Only the simulator
// thread records; snapshots are taken on that thread too, so there is no locking.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtia::sim::detail {

class Tracer {
 public:
  // At most this many events are kept (about 64 MB); later ones are counted as dropped.
  static constexpr size_t kMaxEvents = 1'000'000;

  Tracer(std::string process_name, uint32_t num_queues, uint32_t num_dma_engines,
         size_t max_events = kMaxEvents);

  // The command processor spent [start, start + dur) fetching and dispatching.
  void cp_step(uint64_t start_ps, uint64_t dur_ps);
  // A packet of `queue` from dispatch to completion (from its completion record).
  void packet(uint32_t queue, uint64_t start_ps, uint64_t end_ps, uint64_t seq, uint64_t index,
              uint8_t opcode, uint16_t status, uint16_t error);
  // A DMA job on `engine`.
  struct DmaEvent {
    uint64_t start_ps = 0;  // when the engine took the job
    uint64_t end_ps = 0;    // when it reported completion
    bool fill = false;
    uint64_t bytes = 0;  // payload bytes
    uint64_t src = 0;    // source span start (copies)
    uint8_t src_space = 0;
    uint64_t dst = 0;  // destination span start
    uint8_t dst_space = 0;
    uint64_t effective_bytes = 0;  // bytes charged on the busiest resource, burst waste included
    uint16_t error = 0;
  };
  void dma(uint32_t engine, const DmaEvent& event);
  // Launch PE `pe` (row * grid_cols + col) ran `name` over [start, end): the kernel's span or
  // one unit operation. `name` must be a string with static storage (a literal).
  void pe_op(uint32_t pe, const char* name, uint64_t start_ps, uint64_t end_ps);

  size_t events() const { return events_.size(); }
  uint64_t dropped() const { return dropped_; }
  // The whole trace as JSON text.
  std::string json() const;

 private:
  enum class Kind : uint8_t { kCpStep, kPacket, kDma, kPe };
  struct Event {
    uint64_t ts_ps;
    uint64_t dur_ps;
    uint32_t track;
    Kind kind;
    uint8_t b0;   // packet: opcode; dma: fill flag
    uint8_t b1;   // dma: src space
    uint8_t b2;   // dma: dst space
    uint16_t h0;  // packet: status; dma: error
    uint16_t h1;  // packet: error
    uint64_t a[4];
  };
  bool room();
  void push(const Event& e);

  std::string process_name_;
  uint32_t num_queues_;
  uint32_t num_dma_engines_;
  size_t max_events_;
  std::vector<Event> events_;
  uint64_t dropped_ = 0;
  uint32_t pe_tracks_ = 0;  // PE tracks used so far (named in json())
};

}  // namespace mtia::sim::detail
