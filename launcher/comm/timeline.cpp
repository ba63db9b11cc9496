#include "launcher/comm/timeline.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "common/error.hpp"
#include "common/file.hpp"
#include "common/json.hpp"
#include "common/log.hpp"

namespace saker::comm {

Timeline::Timeline(const std::string& path, int rank) : rank_(rank), origin_(Clock::now()) {
  if (path.empty()) return;
  std::string p = path;
  if (auto pos = p.find("%r"); pos != std::string::npos) p.replace(pos, 2, std::to_string(rank));
  else if (rank != 0) return;  // one file, written by rank 0
  // The trace names every collective and its sizes: only the job's user reads it. A file
  // another user planted at the path (in /tmp, say) or a symbolic link is refused.
  std::string why;
  int fd = file::open_private(p, O_TRUNC, 0600, &why);
  if (fd >= 0 && !(file_ = fdopen(fd, "w"))) {
    why = "fdopen failed";
    ::close(fd);
  }
  if (!file_) {
    log::warn(explain("cannot write the timeline " + p, why,
                      "remove that file, or point SAKER_TIMELINE into a directory of your own; continuing without it"));
    return;
  }
  std::fputs("[\n", file_);
  json::Writer meta;
  meta.begin_object().key("name").value("process_name").key("ph").value("M").key("pid").value(rank)
      .key("args").begin_object().key("name").value("rank " + std::to_string(rank)).end_object().end_object();
  write(meta.str());
}

Timeline::~Timeline() {
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

double Timeline::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void Timeline::write(const std::string& line) {
  std::lock_guard lock(mu_);
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(line.c_str(), file_);
  std::fflush(file_);
}

void Timeline::span(const std::string& name, const char* cat, int tid, Clock::time_point begin,
                    Clock::time_point end, const std::string& args_json) {
  if (!file_) return;
  json::Writer w;
  w.begin_object().key("name").value(name).key("cat").value(cat).key("ph").value("X")
      .key("ts").value(micros(begin)).key("dur").value(micros(end) - micros(begin))
      .key("pid").value(rank_).key("tid").value(tid);
  if (!args_json.empty()) w.key("args").raw(args_json);
  w.end_object();
  write(w.str());
}

void Timeline::instant(const std::string& name, const char* cat, int tid, const std::string& args_json) {
  if (!file_) return;
  json::Writer w;
  w.begin_object().key("name").value(name).key("cat").value(cat).key("ph").value("i").key("s").value("t")
      .key("ts").value(micros(Clock::now())).key("pid").value(rank_).key("tid").value(tid);
  if (!args_json.empty()) w.key("args").raw(args_json);
  w.end_object();
  write(w.str());
}

}  // namespace saker::comm
