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
