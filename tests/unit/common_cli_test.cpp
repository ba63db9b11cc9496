// The shared command-line contract (common/cli.hpp): every newcomer mistake of issue 31
// gets exit 2 and a message that names the thing and the fix.
#include <catch2/catch.hpp>

#include <sstream>

#include "common/cli.hpp"

using namespace saker::cli;

namespace {

const Tool& tool() {
  static const Tool t{"saker-demo",
                      "a tool for the tests",
                      {{"show", "FILE [--last N]", "print FILE", {{"last", "N", "only the last N lines"}}, 1, 1, "FILE"},
                       {"audit verify", "FILE [--key K]", "verify", {{"key", "K", "the MAC key"}}, 1, 1, "FILE"},
                       {"list", "[DIR...] [--json] [--tag T]...", "list",
                        {{"json", "", "as JSON"}, {"tag", "T", "a tag (repeatable)", true}, {"max-restarts", "N", "r"}},
                        0, 8, "DIR"}},
                      "Exit codes: see saker(7).\n"};
  return t;
}

struct Result {
  int code;
  std::string out, err;
  std::vector<std::string> seen;  // positional arguments `run` saw
};

Result run(std::vector<std::string> words) {
  words.insert(words.begin(), "saker-demo");
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  std::ostringstream out, err;
  Result r{};
  r.code = main(tool(), static_cast<int>(argv.size()), argv.data(),
                [&](const Command& c, const Args& a) {
                  r.seen = a.positional;
                  if (a.has("last")) out << "last=" << a.number("last", 0, 1, 1000) << "\n";
                  for (const auto& t : a.all("tag")) out << "tag=" << t << "\n";
                  out << "ran " << c.name << "\n";
                  return kOk;
                },
                out, err);
  r.out = out.str(), r.err = err.str();
  return r;
}

}  // namespace

TEST_CASE("cli: a good command line runs its command") {
  auto r = run({"show", "f.txt", "--last", "3"});
  CHECK(r.code == kOk);
  CHECK(r.out == "last=3\nran show\n");
  CHECK(r.seen == std::vector<std::string>{"f.txt"});
  r = run({"audit", "verify", "--key=k", "log"});
  CHECK(r.code == kOk);
  CHECK(r.out == "ran audit verify\n");
  r = run({"list", "--tag", "a", "d1", "--tag=b", "--", "--odd-dir"});
  CHECK(r.code == kOk);
  CHECK(r.out == "tag=a\ntag=b\nran list\n");
  CHECK(r.seen == std::vector<std::string>{"d1", "--odd-dir"});
}

TEST_CASE("cli: an unknown command exits 2 with a guess, also with --help after it") {
  for (const auto& words : {std::vector<std::string>{"shwo", "f"}, std::vector<std::string>{"shwo", "--help"}}) {
    const auto r = run(words);
    CHECK(r.code == kUsage);
    CHECK(r.out.empty());
    CHECK(r.err.find("unknown command 'shwo'; did you mean 'show'?") != std::string::npos);
    CHECK(r.err.find("the commands are show, audit verify, list") != std::string::npos);
  }
  const auto r = run({"audit", "verfy", "x"});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("did you mean 'audit verify'?") != std::string::npos);
  CHECK(run({"frobnicate"}).err.find("did you mean") == std::string::npos);
  CHECK(run({"info", "f"}).err.find("unknown command 'info'; did you mean 'show'?") != std::string::npos);
  CHECK(run({"status", "f"}).err.find("did you mean") == std::string::npos);  // no 'status' here: no guess
  CHECK(run({"audit", "chekc", "x"}).err.find("unknown command 'audit chekc'") != std::string::npos);
  CHECK(run({"audit"}).err.find("saker-demo: 'audit' needs one more word") != std::string::npos);
}

TEST_CASE("cli: unknown, abbreviated and misplaced options name the right one") {
  auto r = run({"list", "--jsno"});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("unknown option --jsno; did you mean --json?") != std::string::npos);
  CHECK(r.err.find("usage: saker-demo list") != std::string::npos);
  // The Boost behaviour this replaces: "--max-restart 2" was "argument missing".
  r = run({"list", "--max-restart", "2"});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("unknown option --max-restart (options are never abbreviated); did you mean --max-restarts?") !=
        std::string::npos);
  r = run({"show", "f", "--json"});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("did you mean --json? (an option of saker-demo list)") != std::string::npos);
  CHECK(run({"show", "f", "-l", "3"}).code == kUsage);  // single-dash forms are not options here
}

TEST_CASE("cli: values: missing, empty, repeated, not a number, out of range") {
  CHECK(run({"show", "f", "--last"}).err.find("--last needs a value") != std::string::npos);
  CHECK(run({"show", "f", "--last="}).err.find("not an empty word") != std::string::npos);
  CHECK(run({"show", "f", "--last", "1", "--last", "2"}).err.find("--last is given twice") != std::string::npos);
  CHECK(run({"list", "--json=yes"}).err.find("--json takes no value") != std::string::npos);
  auto r = run({"show", "f", "--last", "x3"});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("saker-demo show: --last is 'x3': it must be a whole number from 1 to 1000") != std::string::npos);
  CHECK(run({"show", "f", "--last", "-1"}).code == kUsage);
  CHECK(run({"show", "f", "--last", "0"}).code == kUsage);
  CHECK(run({"show", "f", "--last", "99999999999999999999999"}).code == kUsage);
}

TEST_CASE("cli: positional arguments are counted") {
  auto r = run({"show"});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("saker-demo show: no FILE given") != std::string::npos);
  r = run({"show", "a", "b"});
  CHECK(r.code == kUsage);
  CHECK(r.err.find("unexpected argument 'b': it takes one FILE") != std::string::npos);
}

TEST_CASE("cli: help and version") {
  auto r = run({});
  CHECK(r.code == kUsage);
  CHECK(r.err == "saker: error: saker-demo: no command given (fix: the commands are show, audit verify, list; see "
                 "saker-demo --help)\n");
  r = run({"--quik"});  // one line, not the whole help
  CHECK(r.code == kUsage);
  CHECK(r.err.find("saker-demo: unknown option --quik: only --help and --version come before the command") !=
        std::string::npos);
  CHECK(r.err.find("Usage:") == std::string::npos);
  CHECK(run({"--verison"}).err.find("unknown option --verison; did you mean --version?") != std::string::npos);
  r = run({"--help"});
  CHECK(r.code == kOk);
  CHECK(r.out.find("saker-demo audit verify FILE [--key K]") != std::string::npos);
  CHECK(r.out.find("Exit codes: see saker(7).") != std::string::npos);
  r = run({"list", "--help"});
  CHECK(r.code == kOk);
  CHECK(r.out.find("--tag T") != std::string::npos);
  CHECK(r.out.find("ran") == std::string::npos);
  r = run({"--version"});
  CHECK(r.code == kOk);
  CHECK(r.out.find("saker-demo (Saker)") == 0);
}

TEST_CASE("cli: an exception from the command is exit 1 with the command's name") {
  std::vector<std::string> words{"saker-demo", "show", "f"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  std::ostringstream out, err;
  const int code = main(tool(), 3, argv.data(), [](const Command&, const Args&) -> int { throw std::runtime_error("boom"); },
                        out, err);
  CHECK(code == kFailed);
  CHECK(err.str() == "saker: error: saker-demo show: boom\n");
}

TEST_CASE("cli: closest") {
  CHECK(closest("chekc", {"check", "explain"}) == "check");
  CHECK(closest("ex", {"check", "explain"}) == "explain");
  CHECK(closest("zzzzzz", {"check", "explain"}).empty());
}

TEST_CASE("cli: a Failure keeps its exit code and its message") {
  std::vector<std::string> words{"show", "f"};
  std::ostringstream out, err;
  const int code = main(tool(), words, [](const Command&, const Args&) -> int { throw Failure(kConflict, "saker-demo: taken"); },
                        out, err);
  CHECK(code == kConflict);
  CHECK(err.str() == "saker: error: saker-demo: taken\n");
}

TEST_CASE("cli: a tool without subcommands") {
  const Tool one{"saker-one", "one thing", {{"", "[--json] JOBID", "show the job", {{"json", "", "as JSON"}}, 1, 1, "JOBID"}}, ""};
  const auto call = [&](std::vector<std::string> words) {
    std::ostringstream out, err;
    const int code = main(one, words, [&](const Command&, const Args& a) { out << "job " << a.positional[0]; return kOk; }, out, err);
    return std::make_tuple(code, out.str(), err.str());
  };
  auto [code, out, err] = call({"42", "--json"});
  CHECK(code == kOk);
  CHECK(out == "job 42");
  std::tie(code, out, err) = call({});
  CHECK(code == kUsage);
  CHECK(err.find("saker: error: saker-one: no JOBID given") == 0);
  std::tie(code, out, err) = call({"--jsn", "42"});
  CHECK(code == kUsage);
  CHECK(err.find("saker-one: unknown option --jsn; did you mean --json?") != std::string::npos);
  std::tie(code, out, err) = call({"--help"});
  CHECK(code == kOk);
  CHECK(out.find("Usage: saker-one [--json] JOBID") != std::string::npos);
  std::tie(code, out, err) = call({"help"});  // a JOBID here, not a command
  CHECK(out == "job help");
}

// saker-run's front end (issue 31 §6): -n 4 and -n4, an internal option nobody sees, and option
// parsing that stops at PROGRAM as with srun and torchrun.
TEST_CASE("cli: one-letter aliases, hidden options and a program's command line") {
  const Tool launcher{"saker-go", "launch",
                      {{"", "[OPTIONS] PROGRAM [ARGS...]", "run PROGRAM",
                        {{"local", "", "here"}, {"ntasks", "N", "ranks", false, 'n'}, {"srun-arg", "ARG", "for srun", true},
                         {"secret", "", "internal", false, 0, true}},
                        1, 99, "PROGRAM", true}},
                      ""};
  const auto call = [&](std::vector<std::string> words) {
    std::ostringstream out, err;
    const int code = main(launcher, words, [&](const Command&, const Args& a) {
      out << "n=" << a.number("ntasks", 1, 1) << (a.has("secret") ? " secret" : "") << " |";
      for (const auto& p : a.positional) out << " " << p;
      for (const auto& s : a.all("srun-arg")) out << " srun:" << s;
      return kOk;
    }, out, err);
    return std::make_tuple(code, out.str(), err.str());
  };
  auto [code, out, err] = call({"-n", "4", "train", "-n", "7", "--local", "--", "x"});
  CHECK(code == kOk);
  CHECK(out == "n=4 | train -n 7 --local -- x");  // PROGRAM's words are its own, "--" included
  std::tie(code, out, err) = call({"-n2", "--secret", "--", "--odd", "--help"});
  CHECK(out == "n=2 secret | --odd --help");
  std::tie(code, out, err) = call({"--srun-arg=--cpu-bind=cores", "p"});
  CHECK(out == "n=1 | p srun:--cpu-bind=cores");
  // The value that looks like an option: the fix says how to write it.
  std::tie(code, out, err) = call({"--srun-arg", "--cpu-bind=cores", "p"});
  CHECK(code == kUsage);
  CHECK(err.find("--srun-arg needs a value: the next word, --cpu-bind=cores, is taken for an option (fix: write "
                 "--srun-arg=--cpu-bind=cores if that is its value)") != std::string::npos);
  // A bad number is named as it was written, with a fix that says what is valid.
  std::tie(code, out, err) = call({"-n", "0", "p"});
  CHECK(code == kUsage);
  CHECK(err.find("saker-go: -n is '0': it must be a whole number, 1 or more (fix: pass -n 1 or more)") != std::string::npos);
  std::tie(code, out, err) = call({"-x", "p"});
  CHECK(code == kUsage);
  CHECK(err.find("saker-go: unknown option -x") != std::string::npos);
  std::tie(code, out, err) = call({"--secre", "p"});  // never suggested
  CHECK(err.find("did you mean --secret") == std::string::npos);
  std::tie(code, out, err) = call({"--help"});
  CHECK(out.find("-n, --ntasks N") != std::string::npos);
  CHECK(out.find("secret") == std::string::npos);
  std::tie(code, out, err) = call({"--local"});
  CHECK(code == kUsage);
  CHECK(err.find("saker-go: no PROGRAM given") != std::string::npos);
}

TEST_CASE("cli: an error that does not name its tool is printed after the tool's and command's names") {
  std::vector<std::string> words{"show", "f"};
  std::ostringstream out, err;
  int code = main(tool(), words, [](const Command&, const Args&) -> int { throw Failure(kConflict, "the file changed"); },
                  out, err);
  CHECK(code == kConflict);
  CHECK(err.str() == "saker: error: saker-demo show: the file changed\n");
  std::ostringstream err2;
  code = main(tool(), words, [](const Command&, const Args&) -> int { throw UsageError("--last and --key clash"); }, out,
              err2);
  CHECK(code == kUsage);
  CHECK(err2.str().rfind("saker: error: saker-demo show: --last and --key clash\nusage: saker-demo show", 0) == 0);
}
