#include "sweep/state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.hpp"

namespace saker::sweep {

const char* state_name(State state) {
  switch (state) {
    case State::pending: return "pending";
    case State::running: return "running";
    case State::stopped: return "stopped";
    case State::completed: return "completed";
    case State::failed: return "failed";
    case State::interrupted: return "interrupted";
  }
  return "?";
}

std::string owner_job(const std::string& owner) { return owner.substr(0, owner.find('_')); }

Store::Lock::Lock(const std::filesystem::path& file) {
  std::filesystem::create_directories(file.parent_path());
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0)
    throw Error(explain("cannot lock " + file.string(), std::strerror(errno),
                        "put the sweep's dir: on a file system every node can write and lock"));
}

Store::Lock::~Lock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

void Store::write_file(const std::string& name, const std::string& text) const {
  const std::filesystem::path path = dir_ / name;
  std::filesystem::create_directories(path.parent_path());
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  int saved = errno;
  if (fd >= 0) ::close(fd);
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, saved = errno;  // the rename's own reason
  if (!ok) {
    ::unlink(tmp.c_str());
    throw Error(explain("cannot write " + path.string(), std::strerror(saved),
                        "check free space and permissions of " + dir_.string()));
  }
}

std::string Store::read_file(const std::string& name) const {
  std::ifstream in(dir_ / name, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

void Store::append_file(const std::string& name, const std::string& text) const {
  std::filesystem::create_directories(dir_);
  std::ofstream out(dir_ / name, std::ios::app);
  out << text;
  if (!out) throw Error(explain("cannot append to " + (dir_ / name).string(), std::strerror(errno),
                                "check free space and permissions of the sweep's dir:"));
}

void Store::save(const TrialState& t) const {
  std::string text = "state=" + std::string(state_name(t.state)) + "\nrung=" + std::to_string(t.rung) +
                     "\nruns=" + std::to_string(t.runs) + "\n";
  if (!t.owner.empty()) text += "owner=" + t.owner + "\n";
  char value[40];
  for (const auto& [rung, result] : t.results) {
    std::snprintf(value, sizeof value, "%.17g", result.second);
    text += "result." + std::to_string(rung) + "=" + std::to_string(result.first) + " " + value + "\n";
  }
  std::string reason = t.reason;
  for (char& c : reason)
    if (c == '\n') c = ' ';
  if (!reason.empty()) text += "reason=" + reason + "\n";
  write_file("trials/" + std::to_string(t.id) + "/state", text);
}

TrialState Store::load(std::size_t id) const {
  TrialState t;
  t.id = id;
  const std::string file = "trials/" + std::to_string(id) + "/state";
  std::istringstream in(read_file(file));
  std::string line;
  const auto damaged = [&](const std::string& why) {
    return Error(explain("damaged trial state " + (dir_ / file).string(), why,
                         "delete that file to run trial " + std::to_string(id) + " again from its checkpoint"));
  };
  while (std::getline(in, line)) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) throw damaged("line '" + line + "' is not key=value");
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    try {
      if (key == "state") {
        bool known = false;
        for (State s : {State::pending, State::running, State::stopped, State::completed, State::failed,
                        State::interrupted})
          if (value == state_name(s)) t.state = s, known = true;
        if (!known) throw damaged("unknown state '" + value + "'");
      } else if (key == "rung") {
        t.rung = std::stoul(value);
      } else if (key == "runs") {
        t.runs = static_cast<std::uint32_t>(std::stoul(value));
      } else if (key == "owner") {
        t.owner = value;
      } else if (key == "reason") {
        t.reason = value;
      } else if (key.rfind("result.", 0) == 0) {
        std::size_t used = 0;
        const std::uint64_t step = std::stoull(value, &used);
        t.results[std::stoul(key.substr(7))] = {step, std::stod(value.substr(used))};
      } else {
        throw damaged("unknown key '" + key + "'");
      }
    } catch (const std::logic_error&) {  // std::sto* on garbage
      throw damaged("bad value in line '" + line + "'");
    }
  }
  return t;
}

std::vector<TrialState> Store::load_all(std::size_t count) const {
  std::vector<TrialState> out;
  for (std::size_t id = 0; id < count; ++id) out.push_back(load(id));
  return out;
}

}  // namespace saker::sweep
