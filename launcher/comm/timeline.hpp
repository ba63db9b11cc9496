// SAKER_TIMELINE: a Chrome trace (JSON array of "X"/"i" events) that Perfetto and
// chrome://tracing open. pid = rank, tid = the activity (user ops, fusion, transfer).
// Lines are flushed as they come so that a crashed run still leaves a readable trace
// (the format tolerates a missing closing bracket).
#pragma once

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace saker::comm {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // Empty path or a rank that should not write: an inactive timeline (no cost).
  Timeline(const std::string& path, int rank);
  ~Timeline();
  bool active() const { return file_ != nullptr; }
  void span(const std::string& name, const char* cat, int tid, Clock::time_point begin, Clock::time_point end,
            const std::string& args_json = "");
  void instant(const std::string& name, const char* cat, int tid, const std::string& args_json = "");

  // Records [construction, destruction) as a span.
  class Scope {
   public:
    Scope(Timeline* t, std::string name, const char* cat, int tid, std::string args = "")
        : t_(t && t->active() ? t : nullptr), name_(std::move(name)), cat_(cat), tid_(tid), args_(std::move(args)),
          begin_(Clock::now()) {}
    ~Scope() { if (t_) t_->span(name_, cat_, tid_, begin_, Clock::now(), args_); }

   private:
    Timeline* t_;
    std::string name_;
    const char* cat_;
    int tid_;
    std::string args_;
    Clock::time_point begin_;
  };

 private:
  void write(const std::string& line);
  double micros(Clock::time_point t) const;
  std::FILE* file_ = nullptr;
  int rank_;
  Clock::time_point origin_;
  std::mutex mu_;
  bool first_ = true;
};

enum TimelineTid { kTidUser = 0, kTidFusion = 1, kTidTransfer = 2 };

}  // namespace saker::comm
