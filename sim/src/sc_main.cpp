// libsystemc.so contains its own main() that calls sc_main(), so linking an executable against
// it needs an sc_main symbol even though this project never lets SystemC own main(): the
// simulator runs on a thread that mtia::sim::Device starts. sim/CMakeLists.txt forces this
// object into every executable that links mtia_sim (-u sc_main).
#include <cstdio>

#include <systemc>

int sc_main(int /*argc*/, char* /*argv*/[]) {
  std::fprintf(stderr,
               "mtia-emu: sc_main was called, but the simulator is started by "
               "mtia::sim::Device, not by SystemC's main()\n");
  return 1;
}
