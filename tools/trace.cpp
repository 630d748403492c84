// `mtia-emu trace merge FILES -o OUT`: one trace of several devices.
// `mtia-emu trace summarize FILE`: the run summary of a trace (mtia/trace.h), computed from the
// trace file alone - per-unit utilization, FLOP/s and bytes/s against the preset's peaks, and
// a table of the kernels with their place on the roofline.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "mtia/trace.h"

namespace mtia::tools {

void add_trace_command(CLI::App& app) {
  auto* trace = app.add_subcommand("trace", "work with trace files written by the device");
  trace->require_subcommand(1);
  auto* summarize = trace->add_subcommand(
      "summarize",
      "print the run summary of a trace.json: unit utilization, achieved FLOP/s and bytes/s "
      "against the preset's peaks, and a per-kernel table");
  struct Options {
    std::string file;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  summarize->add_option("FILE", o->file, "trace.json written by a device (write_artifacts)")
      ->required();
  summarize->add_flag("--json", o->json, "print the summary as JSON (as summary.json)");
  summarize->callback([o] {
    const TraceSummary s = summarize_trace_file(o->file);
    const std::string text = o->json ? s.to_json() : s.to_text();
    std::fputs(text.c_str(), stdout);
  });

  auto* merge = trace->add_subcommand(
      "merge",
      "merge the trace.json files of several devices (device k = the k-th file) into one that "
      "ui.perfetto.dev shows with a process track per device");
  struct MergeOptions {
    std::vector<std::string> files;
    std::string out;
  };
  auto m = std::make_shared<MergeOptions>();
  merge->add_option("FILES", m->files, "trace.json files, one per device, in device order")
      ->required();
  merge->add_option("-o,--out", m->out, "the merged trace file")->required();
  merge->callback([m] { merge_trace_files(m->files, m->out); });
}

}  // namespace mtia::tools
