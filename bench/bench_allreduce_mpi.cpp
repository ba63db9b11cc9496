// OpenMPI peer for bench_allreduce (built only for the benchmark).
#include <mpi.h>

#include "bench/allreduce_common.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (std::size_t bytes : bench::sizes()) {
    std::vector<float> buf(bytes / 4, 1.0f);
    int iters = bench::iterations(bytes);
    for (int i = 0; i < 2; ++i) MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters;
    if (rank == 0) std::printf("%zu %.9f\n", bytes, t);
  }
  MPI_Finalize();
}
