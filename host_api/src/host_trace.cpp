// Host API tracing (host_trace.h) and the run summary of a trace (mtia/trace.h).
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "host_trace.h"
#include "mtia/error.h"
#include "mtia/trace.h"
#include "mtia/trace/merge.h"
#include "raise.h"

namespace mtia {

// ---- host calls ------------------------------------------------------------------------------

namespace {
thread_local ApiCall* t_innermost = nullptr;  // innermost active ApiCall of this thread
thread_local ApiCall* t_observed = nullptr;   // outermost ApiCall an activity observer sees
thread_local uint64_t t_activity_tag = 0;     // set_activity_tag
std::atomic<uint64_t> g_next_call_id{1};
}  // namespace

void set_activity_tag(uint64_t tag) {
  t_activity_tag = tag;
}

uint64_t activity_tag() {
  return t_activity_tag;
}

const char* activity_kind_name(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kLaunch:
      return "launch";
    case ActivityKind::kCopy:
      return "copy";
    case ActivityKind::kFill:
      return "fill";
    case ActivityKind::kGraph:
      return "graph";
    case ActivityKind::kLink:
      return "link";
  }
  return "unknown";
}

HostTrace::HostTrace(driver::TraceChannel& channel, TraceLevel level)
    : channel_(channel), level_(level) {}

void HostTrace::set_level(TraceLevel level) {
  level_.store(level, std::memory_order_relaxed);
}

HostTrace::Clock HostTrace::clock() {
  std::lock_guard lock(mu_);
  auto [it, added] = threads_.try_emplace(std::this_thread::get_id());
  if (added) it->second.thread = static_cast<uint32_t>(threads_.size());
  return it->second;
}

void HostTrace::observed(uint64_t end_ps) {
  std::lock_guard lock(mu_);
  auto [it, added] = threads_.try_emplace(std::this_thread::get_id());
  if (added) it->second.thread = static_cast<uint32_t>(threads_.size());
  it->second.now_ps = std::max(it->second.now_ps, end_ps);
}

double HostTrace::wall_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - opened_)
      .count();
}

ApiCall::ApiCall(HostTrace& trace, const char* name) {
  if (t_observed == nullptr) {
    if (std::shared_ptr<ActivityObserver> observer = trace.observer()) {
      observer_ = std::move(observer);
      t_observed = this;
      exceptions_ = std::uncaught_exceptions();
      runtime_.id = g_next_call_id.fetch_add(1, std::memory_order_relaxed);
      runtime_.device = trace.device_index;
      runtime_.tag = t_activity_tag;
      runtime_.name = name;
      runtime_.start_ns = wall_clock_ns();
    }
  }
  if (!trace.on()) return;
  trace_ = &trace;
  parent_ = t_innermost;
  t_innermost = this;
  exceptions_ = std::uncaught_exceptions();
  wall_start_ = std::chrono::steady_clock::now();
  const HostTrace::Clock c = trace.clock();
  call_.thread = c.thread;
  call_.order = trace.next_order();
  call_.start_ps = c.now_ps;
  call_.name = name;
  call_.wall_start_us = trace.wall_us();
}

ApiCall::~ApiCall() {
  if (observer_ != nullptr) {
    t_observed = nullptr;
    runtime_.end_ns = wall_clock_ns();
    runtime_.threw = std::uncaught_exceptions() > exceptions_;
    runtime_.label = std::move(label_);
    observer_->on_runtime_call(runtime_);
  }
  if (trace_ == nullptr) return;
  t_innermost = parent_;
  call_.end_ps = std::max(call_.start_ps, trace_->clock().now_ps);
  call_.wall_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wall_start_)
          .count();
  if (std::uncaught_exceptions() > exceptions_) call_.error = "the call threw";
  try {
    trace_->record(std::move(call_));
  } catch (...) {
    // Tracing never fails a call.
  }
}

void ApiCall::submitted(HostTrace& trace, uint32_t queue, uint64_t seq) {
  ApiCall* call = t_innermost;
  if (call == nullptr || call->trace_ != &trace) return;
  trace::HostPacket p;
  p.queue = queue;
  p.seq = seq;
  p.submit_ps = trace.clock().now_ps;
  p.label = call->label_.empty() ? call->call_.name : call->label_;
  call->call_.packets.push_back(std::move(p));
}

ApiCall::Observed ApiCall::observed_call() {
  const ApiCall* call = t_observed;
  if (call == nullptr) return {};
  return {call->runtime_.id, &call->label_, call->runtime_.name};
}

// ---- summary ---------------------------------------------------------------------------------

TraceSummary summarize_trace(std::string_view text) {
  return value_or_raise(trace::summarize_trace_json(text));
}

TraceSummary summarize_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cannot open trace '{}': {}", path, std::strerror(errno)));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return summarize_trace(text);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", path, e.what()));
  }
}

void merge_trace_files(const std::vector<std::string>& files, const std::string& out) {
  std::vector<std::string> texts;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("cannot open trace '{}': {}", path, std::strerror(errno)));
    }
    texts.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string merged = value_or_raise(trace::merge_traces(texts));
  std::ofstream o(out, std::ios::binary);
  if (!(o << merged) || !o.flush()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cannot write the merged trace '{}': {}", out, std::strerror(errno)));
  }
}

}  // namespace mtia
