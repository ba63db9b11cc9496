// Small text helpers for the signed attestation and the checkpoint's provenance record:
// base64 (RFC 4648, for DSSE envelopes and PEM keys) and hex.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace saker::provenance {

std::string base64_encode(std::string_view bytes);
// Strict: the standard alphabet with '=' padding, no whitespace; nullopt otherwise.
std::optional<std::string> base64_decode(std::string_view text);

std::string hex(std::string_view bytes);
// Lower-case hex of an exact length only; nullopt otherwise.
std::optional<std::string> unhex(std::string_view text);

// SHA-256 of bytes, as 64 lower-case hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace saker::provenance
