// One text for a wall-clock time everywhere Saker prints or stores one: ISO 8601 in UTC,
// "2026-11-27T12:47:01Z" (checkpoint metadata, saker-ckpt ls/show, provenance statements,
// saker-run's attempt lines).
#pragma once

#include <cstdint>
#include <string>

namespace saker {

std::string utc_iso(std::int64_t unix_seconds);

}  // namespace saker
