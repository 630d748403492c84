// `mtia-emu demo`: the default workload.
//
// A host matrix A (rows x cols, fp32) is copied to the device *transposed*, straight from its
// non-contiguous view A^T, into T (cols x rows). A second buffer P (cols x (rows + 2 * pad)) is
// filled with a marker value, T is copied device-to-device into P's interior, and P is copied
// back. The host checks every element against A and the marker, then the device's trace,
// statistics and effective configuration are written to the output folder.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "mtia/device.h"

namespace mtia::tools {
namespace {

struct DemoOptions {
  DeviceFlags device;
  int64_t rows = 1024;
  int64_t cols = 768;
  int64_t pad = 16;
  std::string out = "out/demo";
};

float value_at(int64_t r, int64_t c) {
  return static_cast<float>(r * 1000 + c) * 0.5f;
}

uint64_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

double gbps(uint64_t bytes, int64_t ps) {
  return ps > 0 ? static_cast<double>(bytes) / (static_cast<double>(ps) * 1e-12) / 1e9 : 0.0;
}

void run_demo(const DemoOptions& o) {
  if (o.rows < 1 || o.cols < 1 || o.pad < 0) {
    throw std::invalid_argument("--rows and --cols must be >= 1 and --pad >= 0");
  }
  Device device = Device::open(o.device.options());
  const auto& props = device.properties();
  std::printf("device %s: %u x %u PEs, %u DMA engines, timing %s\n", props.name.c_str(),
              props.pe_rows, props.pe_cols, props.dma_engines, props.timing ? "on" : "off");

  const int64_t rows = o.rows, cols = o.cols, pad = o.pad, prow = rows + 2 * pad;
  const size_t fsz = sizeof(float);
  const float marker = -7.25f;

  // A lives in pinned host memory so the asynchronous copies read it in place.
  auto* a = static_cast<float*>(device.host_alloc(rows * cols * fsz));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) a[r * cols + c] = value_at(r, c);
  std::vector<float> back(static_cast<size_t>(cols * prow));

  DevicePtr t = device.malloc(cols * rows * fsz);
  DevicePtr p = device.malloc(cols * prow * fsz);
  Stream stream = device.create_stream();
  Event start = device.create_event(), transposed = device.create_event(),
        filled = device.create_event(), moved = device.create_event(), done = device.create_event();

  device.record(start, stream);
  // A^T as a view of A: sizes (cols, rows), strides (1, cols) - non-contiguous.
  Layout a_transposed{{cols, rows}, {1, cols}, 0, fsz};
  device.copy_async(t, Layout::contiguous({cols, rows}, fsz), a, a_transposed, stream);
  device.record(transposed, stream);
  device.fill_async(p, Layout::contiguous({cols, prow}, fsz), float_bits(marker), stream);
  device.record(filled, stream);
  // T into the interior of P: rows of P are prow long, T's rows start at column pad.
  Layout interior{{cols, rows}, {prow, 1}, pad, fsz};
  device.copy_async(p, interior, t, Layout::contiguous({cols, rows}, fsz), stream);
  device.record(moved, stream);
  device.copy(back.data(), Layout::contiguous({cols, prow}, fsz), p,
              Layout::contiguous({cols, prow}, fsz), stream);
  device.record(done, stream);
  device.synchronize(stream);

  int64_t errors = 0;
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t j = 0; j < prow; ++j) {
      const bool inside = j >= pad && j < pad + rows;
      const float want = inside ? value_at(j - pad, c) : marker;
      if (back[c * prow + j] != want && errors++ < 5) {
        std::fprintf(stderr, "mismatch at (%lld, %lld): got %g, want %g\n",
                     static_cast<long long>(c), static_cast<long long>(j), back[c * prow + j],
                     want);
      }
    }
  }

  const uint64_t tbytes = rows * cols * fsz, pbytes = cols * prow * fsz;
  std::printf("host->device transposed copy  %8.3f us simulated  %7.2f GB/s  (%llu bytes)\n",
              device.elapsed_ps(start, transposed) / 1e6,
              gbps(tbytes, device.elapsed_ps(start, transposed)),
              static_cast<unsigned long long>(tbytes));
  std::printf("fill                          %8.3f us simulated  %7.2f GB/s\n",
              device.elapsed_ps(transposed, filled) / 1e6,
              gbps(pbytes, device.elapsed_ps(transposed, filled)));
  std::printf("device->device strided copy   %8.3f us simulated  %7.2f GB/s\n",
              device.elapsed_ps(filled, moved) / 1e6,
              gbps(tbytes, device.elapsed_ps(filled, moved)));
  std::printf("device->host copy             %8.3f us simulated  %7.2f GB/s\n",
              device.elapsed_ps(moved, done) / 1e6, gbps(pbytes, device.elapsed_ps(moved, done)));
  std::printf("total                         %8.3f us simulated\n",
              device.elapsed_ps(start, done) / 1e6);

  for (Event e : {start, transposed, filled, moved, done}) device.destroy_event(e);
  device.destroy_stream(stream);
  device.free(t);
  device.free(p);
  device.host_free(a);

  std::filesystem::create_directories(o.out);
  device.write_artifacts(o.out);
  const auto dir = std::filesystem::absolute(o.out).lexically_normal().string();
  std::printf("trace:  %s/trace.json  (open in https://ui.perfetto.dev)\n", dir.c_str());
  std::printf("config: %s/config.json   stats: %s/stats.json\n", dir.c_str(), dir.c_str());
  if (errors != 0) {
    throw std::runtime_error("demo verification failed: " + std::to_string(errors) +
                             " elements differ from the host reference");
  }
  std::printf("verified %lld elements against the host reference: OK\n",
              static_cast<long long>(cols * prow));
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "demo", "copy a transposed matrix to the device, fill, copy on device, copy back, verify");
  auto o = std::make_shared<DemoOptions>();
  o->device.add_to(*cmd);
  cmd->add_option("--rows", o->rows, "rows of the host matrix")->capture_default_str();
  cmd->add_option("--cols", o->cols, "columns of the host matrix")->capture_default_str();
  cmd->add_option("--pad", o->pad, "fill-valued padding around each copied row")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "folder for trace.json, stats.json and config.json")
      ->capture_default_str();
  cmd->callback([o] { run_demo(*o); });
}

}  // namespace mtia::tools
