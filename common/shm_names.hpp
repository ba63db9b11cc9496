// Names of the collective library's shared-memory segments in /dev/shm, and the sweep
// that removes what killed ranks left there.
//
// In common/ and not in launcher/comm so that saker-run sweeps after each attempt without
// linking the collective library; the next communicator created on the node sweeps too
// (launcher/comm/shm.hpp says when anything is left at all).
#pragma once

#include <string>

namespace saker::shm_names {

// "/saker-PID-HEX": the creating process's pid (for the sweep) and 128 bits from
// getrandom(2) as 32 lower-case hex digits. Throws saker::Error when the kernel gives none.
std::string fresh();
bool well_formed(const std::string& name);

// Whether process `pid` has ended. A dead process its parent has not reaped yet (a zombie)
// has ended too, though kill(pid, 0) still succeeds on it.
bool process_gone(int pid);

// Removes this uid's well-formed segments whose creating process is gone; returns how
// many. Never throws. Assumes the processes sharing /dev/shm share a PID namespace.
int sweep_stale() noexcept;

}  // namespace saker::shm_names
