// The job attestation (provenance/attestation.hpp) and its file on the node
// (plugins/spank/attestation_step.hpp). The attack cases play the job's user, who can
// read the attestation and its public key but not the site's private key.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>

#include "ckpt_test_util.hpp"
#include "common/error.hpp"
#include "common/file.hpp"
#include "plugins/spank/attestation_step.hpp"
#include "provenance/ed25519.hpp"
#include "provenance/text.hpp"
#include "provenance_test_util.hpp"

using namespace saker::provenance;
using saker::provenance::testing::make_keys;
using saker::provenance::testing::sample_attestation;
using saker::ckpt::testing::TempDir;

TEST_CASE("attestation: a payload survives format and parse, and nothing else parses", "[attestation]") {
  const Attestation a = sample_attestation();
  CHECK(parse_payload(format_payload(a), "t") == a);
  Attestation empty = a;
  empty.datasets.clear();
  CHECK(parse_payload(format_payload(empty), "t") == empty);
  std::string text = format_payload(a);
  CHECK_THROWS_AS(parse_payload(text + "extra=1\n", "t"), saker::Error);
  CHECK_THROWS_AS(parse_payload(text.substr(0, text.size() - 1), "t"), saker::Error);
  CHECK_THROWS_WITH(parse_payload("saker-job-attestation 1\nuser=x\n", "t"), Catch::Contains("job_id"));
  // A field holding a newline would forge the next field: format refuses it.
  Attestation forged = a;
  forged.account = "x\nzone=DE";
  CHECK_THROWS_AS(format_payload(forged), saker::Error);
}

TEST_CASE("attestation: base64 is strict and canonical", "[attestation]") {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)})
    CHECK(base64_decode(base64_encode(s)) == s);
  // RFC 4648 section 10's vectors: each padding case, written as the standard spells it.
  const std::pair<const char*, const char*> rfc4648[] = {{"", ""},         {"f", "Zg=="},     {"fo", "Zm8="},
                                                          {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
                                                          {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : rfc4648) CHECK(base64_encode(plain) == encoded);
  CHECK(!base64_decode("YQ"));      // no padding
  CHECK(!base64_decode("YR=="));    // non-zero bits under the padding: a second text for "a"
  CHECK(!base64_decode("Y Q=="));
}

TEST_CASE("attestation: signed by the site key, verified by its public key (OpenSSL's PEM files)", "[attestation]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  const SiteKey key = read_site_key(site.private_path, ::geteuid());
  const PublicSiteKey pub = read_public_key(site.public_path);
  CHECK(key.key_id == pub.key_id);
  const Envelope e = parse_envelope(format_envelope(sign(sample_attestation(), key)), "file");
  CHECK(verify_envelope(e, pub) == sample_attestation());
  // The DSSE JSON form carries the same payload and signature.
  CHECK_THAT(envelope_json(e), Catch::Contains("\"payloadType\":\"application/vnd.saker.job-attestation.v1\"") &&
                                   Catch::Contains(base64_encode(e.signature)));
}

TEST_CASE("attestation: OpenSSL's own Ed25519 verifies Saker's signature over DSSE's PAE", "[attestation]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  const Envelope e = sign(sample_attestation(), read_site_key(site.private_path, ::geteuid()));
  saker::ckpt::testing::write_file(dir / "pae", pae(e.payload_type, e.payload), 0600);
  saker::ckpt::testing::write_file(dir / "sig", e.signature, 0600);
  const std::string cmd = "openssl pkeyutl -verify -pubin -inkey '" + site.public_path + "' -rawin -in '" +
                          (dir / "pae").string() + "' -sigfile '" + (dir / "sig").string() + "' >/dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
}

// The prolog's public key (site_key.hpp KnownPublicKey) stands in for deriving it only
// while the key file is the one it came from and the note binds it to the seed read now:
// a replaced key file, or a public key that is not this seed's, is derived afresh.
TEST_CASE("attestation: a known public key is used only for the same key file", "[attestation]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  const SiteKey derived = read_site_key(site.private_path, ::geteuid());
  REQUIRE_FALSE(derived.file_id.empty());
  CHECK_FALSE(derived.pub_known);
  KnownPublicKey known{derived.file_id, derived.pub, key_binding(derived.seed, derived.pub)};
  CHECK(read_site_key(site.private_path, ::geteuid(), &known).pub_known);
  known.pub[0] ^= 1;  // marked, and bound to the seed as only the seed's holder could: proves which one the read took
  known.binding = key_binding(derived.seed, known.pub);
  CHECK(read_site_key(site.private_path, ::geteuid(), &known).pub == known.pub);
  CHECK(read_site_key(site.private_path, ::geteuid(), &known).key_id == key_id_of(known.pub));
  known.file_id = "another file";
  CHECK(read_site_key(site.private_path, ::geteuid(), &known).pub == derived.pub);
  // A new key written to the same path: a new inode, so its own public key.
  const auto other = make_keys(dir.path(), "other");
  REQUIRE(std::rename(other.private_path.c_str(), site.private_path.c_str()) == 0);
  known = KnownPublicKey{derived.file_id, derived.pub, key_binding(derived.seed, derived.pub)};
  const SiteKey replaced = read_site_key(site.private_path, ::geteuid(), &known);
  CHECK(replaced.file_id != derived.file_id);
  CHECK(replaced.pub != derived.pub);
  CHECK(replaced.pub == ed25519::public_of(replaced.seed));
}

// The "double public key" oracle: a note naming the right key file but another public key
// (a key rewritten in place within one mtime tick, a note edited or planted) would have the
// seed sign with a mismatched pair, and two signatures of one message under two public keys
// give the private key away. Without a binding made from this seed the note is not used.
TEST_CASE("attestation attack: a known public key not bound to the seed is not used", "[attestation][attack]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  const SiteKey derived = read_site_key(site.private_path, ::geteuid());
  const auto other = make_keys(dir.path(), "other");
  const SiteKey wrong = read_site_key(other.private_path, ::geteuid());
  // The right file's identity, another key's public half, and each binding but the right one.
  for (const std::string& binding : {std::string(), key_binding(derived.seed, derived.pub), key_binding(wrong.seed, wrong.pub),
                                     std::string(64, '0')}) {
    const KnownPublicKey known{derived.file_id, wrong.pub, binding};
    const SiteKey key = read_site_key(site.private_path, ::geteuid(), &known);
    CHECK_FALSE(key.pub_known);
    CHECK(key.pub == derived.pub);
    CHECK(verify_envelope(sign(sample_attestation(), key), read_public_key(site.public_path)) == sample_attestation());
  }
}

// A node's note of the public key (attestation_step.hpp known_key_path) round-trips, and a
// damaged, absent, older or foreign one is no key at all (the step derives it), never a wrong one.
TEST_CASE("attestation: the node's note of the public key", "[attestation]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  const SiteKey key = read_site_key(site.private_path, ::geteuid());
  const std::string path = saker::spank::known_key_path(dir.path().string(), "saker1");
  CHECK(path == (dir / "saker1" / "attest-key.pub").string());
  CHECK_THROWS(saker::spank::known_key_path(dir.path().string(), "../x"));
  std::filesystem::create_directories(dir / "saker1");
  CHECK_FALSE(saker::spank::read_known_key(path));
  REQUIRE(saker::spank::write_known_key(path, key).empty());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const auto known = saker::spank::read_known_key(path);
  REQUIRE(known);
  CHECK(known->file_id == key.file_id);
  CHECK(known->pub == key.pub);
  CHECK(known->binding == key_binding(key.seed, key.pub));
  CHECK(read_site_key(site.private_path, ::geteuid(), &*known).pub_known);
  const std::string text = saker::file::read(path).value();
  const std::string v1 = "saker-attest-pub 1" + text.substr(text.find('\n'), text.find("bind=") - text.find('\n'));
  for (const std::string& damaged : {text.substr(0, text.size() - 3), text.substr(0, text.size() - 1),
                                     std::string("garbage\n"), text.substr(0, text.find("pub=")) + "pub=zz\n", v1,
                                     text.substr(0, text.find("bind=")) + "bind=00\n"}) {
    saker::ckpt::testing::write_file(path, damaged, 0600);
    CHECK_FALSE(saker::spank::read_known_key(path));
  }
  // Believed only as this user's own file that nobody else may read or write, not a link.
  saker::ckpt::testing::write_file(path, text, 0600);
  REQUIRE(saker::spank::read_known_key(path));
  ::chmod(path.c_str(), 0640);
  CHECK_FALSE(saker::spank::read_known_key(path));
  ::chmod(path.c_str(), 0600);
  const std::string elsewhere = (dir / "note").string();
  REQUIRE(std::rename(path.c_str(), elsewhere.c_str()) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), path.c_str()) == 0);
  CHECK_FALSE(saker::spank::read_known_key(path));
}

// The signer is libsodium where installed and libcrypto elsewhere (ed25519.hpp): both must
// give RFC 8032's bytes, or attestations would depend on which library a node has.
TEST_CASE("attestation: Ed25519 gives RFC 8032's key and signature through either library", "[attestation]") {
  const auto bytes = [](const std::string& hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
  };
  ed25519::Seed seed{};
  const std::string s = bytes("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
  std::copy(s.begin(), s.end(), seed.begin());
  const std::string want_pub = bytes("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  const std::string want_sig = bytes(
      "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b");
  const auto str = [](const auto& a) { return std::string(a.begin(), a.end()); };
  INFO("signing library: " << ed25519::signing_library());
  CHECK(str(ed25519::public_of(seed)) == want_pub);
  CHECK(str(ed25519::public_of_libcrypto(seed)) == want_pub);
  CHECK(str(ed25519::sign(seed, "")) == want_sig);
  CHECK(str(ed25519::sign_libcrypto(seed, "")) == want_sig);
  const std::string message(1000, 'x');
  CHECK(str(ed25519::sign(seed, message)) == str(ed25519::sign_libcrypto(seed, message)));
  // The signer's path (attestation.cpp): the public key given, not derived again.
  CHECK(str(ed25519::sign(seed, ed25519::public_of(seed), "")) == want_sig);
  CHECK(str(ed25519::sign(seed, ed25519::public_of(seed), message)) == str(ed25519::sign_libcrypto(seed, message)));
  CHECK(ed25519::verify(ed25519::public_of(seed), message, ed25519::sign(seed, message)));
}

// ---------------------------------------------------------------- attacks by the job's user

TEST_CASE("attestation attack: every field edited after signing is refused", "[attestation][attack]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  const PublicSiteKey pub = read_public_key(site.public_path);
  const Envelope good = sign(sample_attestation(), read_site_key(site.private_path, ::geteuid()));
  const std::string payload = good.payload;
  int refused = 0, lines = 0;
  for (std::size_t at = payload.find('\n') + 1; at < payload.size(); at = payload.find('\n', at) + 1) {
    ++lines;
    const auto eq = payload.find('=', at);
    Envelope e = good;
    e.payload.insert(eq + 1, "X");  // the value edited, the signature kept
    try {
      verify_envelope(e, pub);
    } catch (const saker::Error& err) {
      CHECK_THAT(err.what(), Catch::Contains("signature does not match"));
      ++refused;
    }
  }
  CHECK(lines == 16);  // 12 fields, 2 datasets, the audit log and its head: every one tried
  CHECK(refused == lines);
  // A dataset removed (the laundering a user would want) is refused the same way.
  Envelope fewer = good;
  fewer.payload.erase(fewer.payload.find("dataset=patients"), fewer.payload.find('\n', fewer.payload.find("dataset=patients")) -
                                                                  fewer.payload.find("dataset=patients") + 1);
  CHECK_THROWS_WITH(verify_envelope(fewer, pub), Catch::Contains("signature does not match"));
}

TEST_CASE("attestation attack: a flipped signature bit, another key, another payload type", "[attestation][attack]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  const auto own = make_keys(dir.path(), "users-own");
  const PublicSiteKey pub = read_public_key(site.public_path);
  const Envelope good = sign(sample_attestation(), read_site_key(site.private_path, ::geteuid()));
  for (std::size_t byte = 0; byte < 64; byte += 7) {
    Envelope e = good;
    e.signature[byte] = static_cast<char>(e.signature[byte] ^ 0x01);
    CHECK_THROWS_WITH(verify_envelope(e, pub), Catch::Contains("signature does not match"));
  }
  // Signed with the user's own key: named as another key.
  const Envelope forged = sign(sample_attestation(), read_site_key(own.private_path, ::geteuid()));
  CHECK_THROWS_WITH(verify_envelope(forged, pub), Catch::Contains("not the given site key"));
  // ... and still refused when the forger also writes the site's key id into it.
  Envelope relabelled = forged;
  relabelled.key_id = pub.key_id;
  CHECK_THROWS_WITH(verify_envelope(relabelled, pub), Catch::Contains("signature does not match"));
  Envelope other_type = good;
  other_type.payload_type = "application/vnd.in-toto+json";
  CHECK_THROWS_WITH(verify_envelope(other_type, pub), Catch::Contains("payload type"));
  Envelope short_sig = good;
  short_sig.signature.pop_back();
  CHECK_THROWS_WITH(verify_envelope(short_sig, pub), Catch::Contains("63 bytes"));
}

TEST_CASE("attestation: a site key others may read, or a link, is refused and named", "[attestation][attack]") {
  TempDir dir;
  const auto site = make_keys(dir.path(), "site");
  for (const mode_t mode : {0640, 0604, 0660, 0644}) {
    ::chmod(site.private_path.c_str(), mode);
    CHECK_THROWS_WITH(read_site_key(site.private_path, ::geteuid()),
                      Catch::Contains(site.private_path) && Catch::Contains("chmod 600"));
  }
  ::chmod(site.private_path.c_str(), 0600);
  CHECK_NOTHROW(read_site_key(site.private_path, ::geteuid()));
  // Owned by someone else (in slurmstepd: anyone but root).
  CHECK_THROWS_WITH(read_site_key(site.private_path, ::geteuid() + 1), Catch::Contains("owned by uid"));
  const auto link = (dir / "link.key").string();
  std::filesystem::create_symlink(site.private_path, link);
  CHECK_THROWS_WITH(read_site_key(link, ::geteuid()), Catch::Contains(link));
  CHECK_THROWS_WITH(read_site_key((dir / "missing.key").string(), ::geteuid()), Catch::Contains("openssl genpkey"));
  saker::ckpt::testing::write_file(dir / "rsa.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", 0600);
  CHECK_THROWS_WITH(read_site_key((dir / "rsa.key").string(), ::geteuid()), Catch::Contains("not an Ed25519 private key"));
}

// ---------------------------------------------------------------- the node's side

TEST_CASE("attestation: built from the node record, never from what the step declares", "[attestation]") {
  saker::spank::NodeRecord r;
  r.job_id = 77;
  r.uid = 1001;
  r.user = "saker-alice";
  r.account = "radiology";
  r.partition = "ae";
  r.nodes = "saker[1-2]";
  r.zone = "AE";
  r.policy_revision = "rev1";
  r.datasets = {{"patients", "v3"}};
  saker::spank::StepIds ids;
  ids.job_id = 78;
  ids.step_id = 0xfffffffb;  // the batch step
  ids.array_job_id = 77;
  ids.array_task_id = 1;
  const Attestation a = saker::spank::build_attestation(ids, r, "saker1", "", 1700000000);
  CHECK(a.job_id == "78");
  CHECK(a.step_id == "batch");
  CHECK(a.array_job_id == "77");
  CHECK(a.array_task_id == "1");
  CHECK(a.user == "saker-alice");
  CHECK(a.zone == "AE");
  REQUIRE(a.datasets.size() == 1);
  CHECK(a.datasets[0] == AttestedDataset{"patients", "v3", "rev1", ""});
  CHECK(a.audit_head.empty());
  // The array's last task keeps the array's id as its job id: still an array task.
  ids.job_id = 77;
  ids.array_task_id = 4;
  const Attestation last = saker::spank::build_attestation(ids, r, "saker1", "", 1700000000);
  CHECK(last.array_job_id == "77");
  CHECK(last.array_task_id == "4");
  ids.array_job_id = 0;
  CHECK(saker::spank::build_attestation(ids, r, "saker1", "", 1700000000).array_job_id.empty());
  // Outside an array slurmstepd reports the job's own id and NO_VAL as the task.
  ids.array_job_id = 77;
  ids.array_task_id = 0xfffffffe;
  CHECK(saker::spank::build_attestation(ids, r, "saker1", "", 1700000000).array_job_id.empty());
}

TEST_CASE("attestation: the file is written for the job's group to read and nobody to write", "[attestation]") {
  TempDir dir;
  const std::string path = saker::spank::attestation_path((dir / "attest").string(), "saker1", 77, "0");
  CHECK(path == (dir / "attest/saker1/job-77.0.att").string());
  REQUIRE(saker::spank::write_attestation_file(path, "text\n", ::getegid()) == "");
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0440);
  CHECK(st.st_gid == ::getegid());
  REQUIRE(::stat((dir / "attest/saker1").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0711);  // reachable, not listable
  CHECK(saker::file::read(path) == std::string("text\n"));
  CHECK(std::distance(std::filesystem::directory_iterator(dir / "attest/saker1"), {}) == 1);  // no temporary left
  // Written again (a requeued step): replaced atomically.
  REQUIRE(saker::spank::write_attestation_file(path, "again\n", ::getegid()) == "");
  CHECK(saker::file::read(path) == std::string("again\n"));
  // A node directory someone made group-writable is not trusted.
  ::chmod((dir / "attest/saker1").c_str(), 0777);
  CHECK_THAT(saker::spank::write_attestation_file(path, "x\n", ::getegid()), Catch::Contains("only it may write"));
  ::chmod((dir / "attest/saker1").c_str(), 0711);
  CHECK(saker::spank::remove_job_attestations((dir / "attest").string(), "saker1", 77) == 1);
  CHECK(saker::spank::remove_job_attestations((dir / "attest").string(), "saker1", 77) == 0);
  CHECK_THROWS_AS(saker::spank::attestation_path((dir / "attest").string(), "../x", 77, "0"), saker::Error);
}

TEST_CASE("attestation: the node record carries partition, nodes, zone and policy revision from the prolog",
          "[attestation][node_record]") {
  const std::map<std::string, std::string> env = {{"SLURM_JOB_UID", "1001"},         {"SLURM_JOB_USER", "saker-alice"},
                                                  {"SLURM_JOB_ACCOUNT", "medical"},   {"SLURM_JOB_PARTITION", "cpu-ae"},
                                                  {"SLURM_JOB_NODELIST", "saker[1-2]"}, {"SPANK_SAKER_DATASETS", "patients@v3"}};
  saker::spank::NodeRecord r = saker::spank::node_record_from_env(9, [&](const char* k) -> const char* {
    const auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  CHECK(r.partition == "cpu-ae");
  CHECK(r.nodes == "saker[1-2]");
  r.zone = "ae";
  r.policy_revision = "abc";
  const std::string text = saker::spank::format_node_record(r);
  const auto back = saker::spank::parse_node_record(text);
  CHECK(back.partition == "cpu-ae");
  CHECK(back.nodes == "saker[1-2]");
  CHECK(back.zone == "ae");
  CHECK(back.policy_revision == "abc");
  // A record the previous release's prolog wrote (10 fields) still reads, without them.
  const auto old = saker::spank::parse_node_record(text.substr(0, text.find("partition=")));
  CHECK(old.partition.empty());
  CHECK(old.datasets.size() == 1);
  CHECK_THROWS(saker::spank::parse_node_record(text.substr(0, text.find("zone="))));
}
