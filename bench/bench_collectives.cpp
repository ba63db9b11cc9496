// Saker's reduce-scatter, alltoall and allgather, timed as bench_collectives_mpi times
// OpenMPI's (bench/collectives_common.hpp). One rank per process, bootstrapped from the
// environment: run under `saker-run --local -n N` (bench/bench_collectives.sh runs both).
#include <cstdio>
#include <exception>

#include "bench/collectives_common.hpp"
#include "saker/comm.hpp"

int main() {
  try {
    auto c = saker::comm::Communicator::from_environment();
    const int np = c->size();
    std::vector<std::size_t> counts;
    bench::measure_collectives(
        c->rank(), np,
        [&](const float* s, float* r, std::size_t part) {
          counts.assign(static_cast<std::size_t>(np), part);
          c->reduce_scatter(s, r, counts, saker::comm::DataType::f32);
        },
        [&](const float* s, float* r, std::size_t part) {
          counts.assign(static_cast<std::size_t>(np), part);
          c->alltoallv(s, counts, r, counts, 1, saker::comm::DataType::f32);
        },
        [&](const float* s, float* r, std::size_t part) { c->allgather(s, r, part * 4); }, [&] { c->barrier(); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 1;
  }
}
