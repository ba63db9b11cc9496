#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/file.hpp"

namespace {

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& bytes) {
    char tmpl[] = "/tmp/saker-file-test-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    path = tmpl;
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("file::read returns every byte, whatever the size") {
  for (std::size_t size : {0u, 1u, 16383u, 16384u, 16385u, 200000u}) {
    std::string bytes(size, '\0');
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 7 + 3);  // NULs included
    TempFile f(bytes);
    const auto back = saker::file::read(f.path);
    REQUIRE(back);
    CHECK(*back == bytes);
  }
}

TEST_CASE("file::read reads /proc files, which report size 0") {
  const auto id = saker::file::read("/proc/self/status");
  REQUIRE(id);
  CHECK(id->find("Pid:") != std::string::npos);
}

TEST_CASE("file::read says why it could not read: errno") {
  errno = 0;
  CHECK_FALSE(saker::file::read("/nonexistent/saker-file-test"));
  CHECK(errno == ENOENT);
  errno = 0;
  CHECK_FALSE(saker::file::read("/"));  // a directory opens but does not read
  CHECK(errno == EISDIR);
}

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? static_cast<unsigned>(st.st_mode) & 07777 : 0;
}

std::string contents(const std::string& path) { return saker::file::read(path).value_or("<unreadable>"); }

void put(int fd, const std::string& s) { REQUIRE(::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size())); }

}  // namespace

TEST_CASE("file::open_private: new files get exactly the mode, whatever the umask") {
  const std::string path = "/tmp/saker-private-" + std::to_string(::getpid());
  const mode_t old = ::umask(0);
  std::string why;
  int fd = saker::file::open_private(path, O_TRUNC, 0600, &why);
  ::umask(old);
  REQUIRE(fd >= 0);
  put(fd, "one\n");
  ::close(fd);
  CHECK(mode_of(path) == 0600);
  // The user's own older file: reused, narrowed to the mode, truncated or appended to.
  ::chmod(path.c_str(), 0644);
  fd = saker::file::open_private(path, O_APPEND, 0600, &why);
  REQUIRE(fd >= 0);
  put(fd, "two\n");
  ::close(fd);
  CHECK(contents(path) == "one\ntwo\n");
  CHECK(mode_of(path) == 0600);
  fd = saker::file::open_private(path, O_TRUNC, 0600, &why);
  REQUIRE(fd >= 0);
  ::close(fd);
  CHECK(contents(path).empty());
  std::remove(path.c_str());
}

TEST_CASE("file::open_private attack: another user's file or a symbolic link is refused and left alone") {
  TempFile planted("theirs");
  ::chmod(planted.path.c_str(), 0666);
  REQUIRE(::chown(planted.path.c_str(), 65534, 65534) == 0);
  std::string why;
  CHECK(saker::file::open_private(planted.path, O_TRUNC, 0600, &why) == -1);
  CHECK(why.find("uid 65534") != std::string::npos);
  CHECK(contents(planted.path) == "theirs");
  CHECK(mode_of(planted.path) == 0666);

  TempFile target("target");
  const std::string link = target.path + ".link";
  REQUIRE(::symlink(target.path.c_str(), link.c_str()) == 0);
  CHECK(saker::file::open_private(link, O_APPEND, 0600, &why) == -1);
  CHECK(why == "it is a symbolic link");
  CHECK(contents(target.path) == "target");
  std::remove(link.c_str());
}
