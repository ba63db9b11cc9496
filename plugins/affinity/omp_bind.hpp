// OpenMP thread binding inside a task (--omp-bind, plugstack omp-bind=).
//
// The plan always sets the task's own CPU mask and tells OpenMP how many threads fit
// (OMP_NUM_THREADS). Pinning each OpenMP thread to a core of that mask (OMP_PLACES and
// OMP_PROC_BIND) is an opt-in: GNU OpenMP (libgomp, which PyTorch loads on import) then
// binds the task's *initial* thread to the first place at start-up, and every thread or
// process started from it later (DataLoader workers, NCCL/Gloo/Saker comm threads,
// torch's inter-op pool) inherits that single core. Pure OpenMP codes gain from it;
// Python and PyTorch tasks collapse onto one core.
#pragma once

#include <string>
#include <string_view>

namespace saker::affinity {

enum class OmpBind {
  none,    // OMP_NUM_THREADS only; threads float over the task's CPUs (the default)
  close,   // also OMP_PLACES (one place per core) and OMP_PROC_BIND=close
  spread,  // also OMP_PLACES and OMP_PROC_BIND=spread
};

// "none" | "close" | "spread"; throws saker::Error naming `where` (the option or
// plugstack key), the bad value and the accepted ones otherwise.
OmpBind parse_omp_bind(const std::string& text, const std::string& where);

// The value as written on the command line (and as OMP_PROC_BIND takes it).
std::string_view omp_bind_name(OmpBind bind);

}  // namespace saker::affinity
