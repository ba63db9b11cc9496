// OpenMPI peer for bench_allreduce (built only for the benchmark).
#include <mpi.h>

#include "bench/allreduce_common.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  bench::measure(
      rank, np,
      [](std::vector<float>& b) {
        MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(b.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      },
      [] { MPI_Barrier(MPI_COMM_WORLD); });
  MPI_Finalize();
}
