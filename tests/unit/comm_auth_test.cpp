// The job key and the handshake (launcher/comm/auth.hpp), message by message: what an
// attacker on the path or on the node can try against it, and the key sources.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "launcher/comm/auth.hpp"

using namespace saker::comm;
using namespace saker::comm::auth;

namespace {

JobKey key_a() { return JobKey::from_raw(std::string(32, '\x5a')); }
JobKey key_b() { return JobKey::from_raw(std::string(32, '\x33')); }

bool accepts_link(Kind k) { return k == Kind::link; }

struct Run {
  std::array<unsigned char, kHelloBytes> hello;
  std::array<unsigned char, kReplyBytes> reply;
  std::array<unsigned char, kFinishBytes> finish;
  LinkKeys client, server;
};

// A complete honest handshake: client rank 1 -> server rank 0, link, channel 3.
Run honest(const Context& cc, const Context& sc) {
  Run r{};
  ClientSide c(cc, Claim{Kind::link, 1, 0, 3});
  ServerSide s(sc, 0, accepts_link);
  r.hello = c.hello();
  r.reply = s.on_hello(r.hello.data(), 4);
  r.finish = c.on_reply(r.reply.data());
  s.on_finish(r.finish.data());
  r.client = c.keys();
  r.server = s.keys();
  return r;
}

// Writes 64 hex digits to path with mode (the directory is made 0700 unless dir_mode given).
std::string key_file(const std::string& dir, mode_t mode, mode_t dir_mode = 0700) {
  mkdir(dir.c_str(), 0700);
  chmod(dir.c_str(), dir_mode);
  std::string path = dir + "/key";
  unlink(path.c_str());
  std::ofstream(path) << key_a().hex() << "\n";
  chmod(path.c_str(), mode);
  return path;
}

}  // namespace

TEST_CASE("handshake: both sides agree, and the link keys match crosswise", "[comm][auth]") {
  Context ctx{key_a(), "job 7 step 0"};
  Run r = honest(ctx, ctx);
  CHECK(r.client.send == r.server.recv);
  CHECK(r.client.recv == r.server.send);
  CHECK(r.client.send != r.client.recv);
  Run again = honest(ctx, ctx);  // fresh nonces: fresh keys
  CHECK(again.client.send != r.client.send);
}

TEST_CASE("handshake: a wrong key is refused by both sides", "[comm][auth]") {
  Context good{key_a(), "job 7 step 0"}, bad{key_b(), "job 7 step 0"};
  ServerSide s(good, 0, accepts_link);
  ClientSide c(bad, Claim{Kind::link, 1, 0, 3});
  CHECK_THROWS_AS(s.on_hello(c.hello().data(), 4), Refused);  // its key id differs
  // A stranger who copies our key id (from a Hello to this server) still cannot produce
  // either MAC.
  auto hello = c.hello();
  auto genuine = ClientSide(good, Claim{Kind::link, 1, 0, 3}).hello();
  std::copy(genuine.begin() + 24, genuine.begin() + 32, hello.begin() + 24);
  auto reply = s.on_hello(hello.data(), 4);
  CHECK_THROWS_AS(c.on_reply(reply.data()), Refused);
  std::array<unsigned char, kFinishBytes> guess{};
  CHECK_THROWS_AS(s.on_finish(guess.data()), Refused);
  // Another job or step with the same key does not join either.
  Context other_step{key_a(), "job 7 step 1"};
  CHECK_THROWS_AS(honest(other_step, good), Refused);
}

TEST_CASE("handshake: a captured handshake replayed to the same server is refused", "[comm][auth]") {
  Context ctx{key_a(), "job 7 step 0"};
  Run captured = honest(ctx, ctx);
  ServerSide s(ctx, 0, accepts_link);
  s.on_hello(captured.hello.data(), 4);  // a new server nonce...
  CHECK_THROWS_AS(s.on_finish(captured.finish.data()), Refused);  // ...so the old MAC fails
}

TEST_CASE("handshake: re-targeted to another rank, channel or kind, it is refused", "[comm][auth]") {
  Context ctx{key_a(), "job 7 step 0"};
  ClientSide c(ctx, Claim{Kind::link, 1, 0, 3});
  auto hello = c.hello();
  ServerSide rank2(ctx, 2, accepts_link);
  CHECK_THROWS_WITH(rank2.on_hello(hello.data(), 4), Catch::Contains("meant for rank 0"));
  ServerSide store(ctx, 0, [](Kind k) { return k == Kind::store; });
  CHECK_THROWS_AS(store.on_hello(hello.data(), 4), Refused);
  // A man in the middle rewrites the channel (byte 16) or the kind (byte 5): the server
  // answers the rewritten claim, and the client, which signed its own, refuses.
  for (std::size_t at : {std::size_t{16}, std::size_t{5}}) {
    auto forged = hello;
    forged[at] = at == 5 ? static_cast<unsigned char>(Kind::abort) : 4;
    ServerSide s(ctx, 0, [](Kind) { return true; });
    auto reply = s.on_hello(forged.data(), 4);
    ClientSide fresh = c;
    CHECK_THROWS_AS(fresh.on_reply(reply.data()), Refused);
  }
}

TEST_CASE("handshake: a peer claiming another rank is refused", "[comm][auth]") {
  Context ctx{key_a(), "job 7 step 0"};
  // Rank 2 signed its own claim; someone on the path relabels it as rank 1.
  ClientSide c(ctx, Claim{Kind::link, 2, 0, 0});
  auto hello = c.hello();
  hello[8] = 1;
  ServerSide s(ctx, 0, accepts_link);
  auto reply = s.on_hello(hello.data(), 4);
  CHECK(s.claim().client_rank == 1);
  CHECK_THROWS_AS(c.on_reply(reply.data()), Refused);
  // Nor does rank 2's finish pass for the relabelled claim.
  ClientSide c2(ctx, Claim{Kind::link, 2, 0, 0});
  auto h2 = c2.hello();
  ServerSide honest_server(ctx, 0, accepts_link);
  auto r2 = honest_server.on_hello(h2.data(), 4);
  auto finish = c2.on_reply(r2.data());
  auto h2_as_1 = h2;
  h2_as_1[8] = 1;
  ServerSide s2(ctx, 0, accepts_link);
  s2.on_hello(h2_as_1.data(), 4);
  CHECK_THROWS_AS(s2.on_finish(finish.data()), Refused);
  // Ranks outside the job are refused before any MAC.
  auto out = c.hello();
  out[8] = 9;
  ServerSide s3(ctx, 0, accepts_link);
  CHECK_THROWS_AS(s3.on_hello(out.data(), 4), Refused);
}

TEST_CASE("handshake: the server's MAC reflected back as the client's is refused", "[comm][auth]") {
  Context ctx{key_a(), "job 7 step 0"};
  ClientSide c(ctx, Claim{Kind::link, 1, 0, 3});
  ServerSide s(ctx, 0, accepts_link);
  auto reply = s.on_hello(c.hello().data(), 4);
  CHECK_THROWS_AS(s.on_finish(reply.data() + 36), Refused);
}

TEST_CASE("job key: 64 hex digits, else an error that never repeats the text", "[comm][auth]") {
  JobKey k = JobKey::parse_hex(" " + key_a().hex() + "\n", "SAKER_JOB_KEY");
  CHECK(k.bytes == key_a().bytes);
  CHECK(JobKey::parse_hex(std::string(64, 'A'), "x").hex() == std::string(64, 'a'));
  for (std::string bad : {std::string(63, 'a'), std::string(65, 'a'), std::string(63, 'a') + "g", std::string()}) {
    try {
      JobKey::parse_hex(bad, "SAKER_JOB_KEY");
      FAIL("accepted " << bad);
    } catch (const saker::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("SAKER_JOB_KEY") && Catch::Contains("64 hex digits"));
      if (!bad.empty()) CHECK_THAT(e.what(), !Catch::Contains(bad));
    }
  }
  CHECK(JobKey::generate().bytes != JobKey::generate().bytes);
  CHECK(key_a().id_hex().size() == 16);
  CHECK(key_a().id_hex() != key_b().id_hex());
}

TEST_CASE("job key file: only 0600 in a 0700 directory, both this user's", "[comm][auth]") {
  const std::string dir = "/tmp/saker-auth-test-" + std::to_string(getpid());
  CHECK(read_key_file(key_file(dir, 0600)).bytes == key_a().bytes);
  CHECK(read_key_file(key_file(dir, 0400)).bytes == key_a().bytes);
  CHECK_THROWS_WITH(read_key_file(key_file(dir, 0644)), Catch::Contains("group or others") && Catch::Contains("0644"));
  CHECK_THROWS_WITH(read_key_file(key_file(dir, 0600, 0755)), Catch::Contains("directory") && Catch::Contains("0755"));
  std::string path = key_file(dir, 0600);
  if (geteuid() == 0) {  // another owner: as root we can make one
    REQUIRE(chown(path.c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(read_key_file(path), Catch::Contains("another user"));
    REQUIRE(chown(path.c_str(), 0, 0) == 0);
    REQUIRE(chown(dir.c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(read_key_file(path), Catch::Contains("directory") && Catch::Contains("another user"));
    REQUIRE(chown(dir.c_str(), 0, 0) == 0);
  } else {
    CHECK_THROWS_WITH(read_key_file("/etc/passwd"), Catch::Contains("another user"));
  }
  std::string link = dir + "/link";
  REQUIRE(symlink(path.c_str(), link.c_str()) == 0);
  CHECK_THROWS_WITH(read_key_file(link), Catch::Contains("symbolic link"));
  unlink(link.c_str());
  std::string fifo = dir + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_key_file(fifo), Catch::Contains("not a regular file"));  // without waiting for a writer
  unlink(fifo.c_str());
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("job key from the environment: SAKER_JOB_KEY, then SAKER_JOB_KEY_FILE", "[comm][auth]") {
  unsetenv("SAKER_JOB_KEY");
  unsetenv("SAKER_JOB_KEY_FILE");
  CHECK_FALSE(key_from_environment().has_value());
  const std::string dir = "/tmp/saker-auth-env-" + std::to_string(getpid());
  setenv("SAKER_JOB_KEY_FILE", key_file(dir, 0644).c_str(), 1);
  CHECK_THROWS_WITH(key_from_environment(), Catch::Contains("SAKER_JOB_KEY_FILE"));
  setenv("SAKER_JOB_KEY", key_b().hex().c_str(), 1);
  CHECK(key_from_environment()->bytes == key_b().bytes);
  unsetenv("SAKER_JOB_KEY");
  unsetenv("SAKER_JOB_KEY_FILE");
  unlink((dir + "/key").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("no key: a communicator of several ranks fails closed, naming the fixes", "[comm][auth]") {
  Options o;
  o.ignore_environment = true;
  o.timeout = std::chrono::seconds(2);
  try {
    Communicator::create(make_memory_store(), Placement{0, 2, "n", "h", -1}, o);
    FAIL("created without a key");
  } catch (const saker::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("no job key") && Catch::Contains("saker-run") &&
                             Catch::Contains("srun --mpi=pmi2") && Catch::Contains("spank_saker.so") &&
                             Catch::Contains("SAKER_JOB_KEY_FILE"));
  }
  CHECK_THROWS_WITH(TcpStoreServer(0, o, "127.0.0.1"), Catch::Contains("no job key"));
  // One rank needs no key; Transit::off needs none either (benchmarks only).
  CHECK(Communicator::create(make_memory_store(), Placement{0, 1, "n", "h", -1}, o)->size() == 1);
  o.transit = Transit::off;
  TcpStoreServer open_server(0, o, "127.0.0.1");
  CHECK(open_server.port() > 0);
}
