// OpenMPI peer for bench_collectives (built only for the benchmark): MPI_Reduce_scatter_block,
// MPI_Alltoall and MPI_Allgather, timed by bench/collectives_common.hpp. Run under mpirun.
#include <mpi.h>

#include "bench/collectives_common.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  bench::measure_collectives(
      rank, np,
      [](const float* s, float* r, std::size_t part) {
        MPI_Reduce_scatter_block(s, r, static_cast<int>(part), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      },
      [](const float* s, float* r, std::size_t part) {
        MPI_Alltoall(s, static_cast<int>(part), MPI_FLOAT, r, static_cast<int>(part), MPI_FLOAT, MPI_COMM_WORLD);
      },
      [](const float* s, float* r, std::size_t part) {
        MPI_Allgather(s, static_cast<int>(part), MPI_FLOAT, r, static_cast<int>(part), MPI_FLOAT, MPI_COMM_WORLD);
      },
      [] { MPI_Barrier(MPI_COMM_WORLD); });
  MPI_Finalize();
}
