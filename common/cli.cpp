#include "common/cli.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <ostream>

#include "common/version.hpp"

namespace saker::cli {

namespace {

// Edit distance with transpositions (optimal string alignment).
std::size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string shortest(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string pad(std::string head, std::size_t width) {
  if (head.size() < width) head.resize(width, ' ');
  else head += "\n" + std::string(width, ' ');
  return head;
}

// `text` in lines of at most `width` columns, each continuation indented by `indent`.
std::string wrap(const std::string& text, std::size_t width, std::size_t indent) {
  std::string out, line;
  std::size_t from = 0;
  while (from < text.size()) {
    std::size_t space = text.find(' ', from);
    if (space == std::string::npos) space = text.size();
    const std::string word = text.substr(from, space - from);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    from = space + 1;
  }
  return out + line;
}

// The command's one-line summary for the command list: its first sentence.
std::string first_sentence(const std::string& what) {
  const std::size_t stop = what.find(". ");
  return stop == std::string::npos ? what : what.substr(0, stop);
}

std::string full_name(const Tool& tool, const Command& c) { return c.name.empty() ? tool.name : tool.name + " " + c.name; }

// A tool without subcommands: its one command has no name (saker-stats JOBID).
bool single(const Tool& tool) { return tool.commands.size() == 1 && tool.commands[0].name.empty(); }

std::string option_text(const Option& o) {
  return (o.letter != 0 ? std::string("-") + o.letter + ", " : "") + "--" + o.name + (o.value.empty() ? "" : " " + o.value);
}

std::vector<const Option*> visible(const Command& c) {
  std::vector<const Option*> v;
  for (const Option& o : c.options)
    if (!o.hidden) v.push_back(&o);
  return v;
}

std::string known_options(const Tool& tool, const Command& c) {
  const std::vector<const Option*> shown = visible(c);
  if (shown.empty()) return full_name(tool, c) + " takes no options";
  if (shown.size() > 8) return "see " + full_name(tool, c) + " --help for its " + std::to_string(shown.size()) + " options";
  std::string s = full_name(tool, c) + " takes";
  for (const Option* o : shown) s += " " + option_text(*o) + ",";
  s.back() = ';';
  return s + " see " + full_name(tool, c) + " --help";
}

// "unknown option --quik; did you mean --quiet?", looking in the command's own options
// first, then in the other commands' (an option given to the wrong command).
std::string unknown_option(const Tool& tool, const Command& c, const std::string& typed, const std::string& name) {
  std::vector<std::string> own;
  for (const Option* o : visible(c)) own.push_back(o->name);
  std::string guess = closest(name, own), whose;
  for (const Command& other : tool.commands) {
    if (!guess.empty()) break;
    for (const Option& o : other.options)
      if (other.name != c.name && !o.hidden && closest(name, {o.name}) == o.name) {
        guess = o.name, whose = other.name;
        break;
      }
  }
  std::string what = full_name(tool, c) + ": unknown option " + typed;
  if (!guess.empty() && guess.rfind(name, 0) == 0 && whose.empty())
    what += " (options are never abbreviated); did you mean --" + guess + "?";
  else if (!guess.empty())
    what += "; did you mean --" + guess + "?" + (whose.empty() ? "" : " (an option of " + tool.name + " " + whose + ")");
  return explain(what, "", known_options(tool, c));
}

// Stores option `o`, written `spelled` ("--name" or "-x") in words[*i], with its value
// `attached` to the word (--name=V, -xV) or else the next word; UsageError if bad.
void take_option(const Tool& tool, const Command& c, const Option& o, const std::vector<std::string>& words,
                 std::size_t* i, const std::string& spelled, const std::optional<std::string>& attached, Args* a) {
  const std::string who = full_name(tool, c) + ": " + spelled;
  if (a->has(o.name) && !o.repeatable) throw UsageError(explain(who + " is given twice", "", "give it once"));
  std::string value;
  if (o.value.empty()) {
    if (attached) throw UsageError(explain(who + " takes no value", "it is a switch", "write " + spelled + " alone"));
  } else if (attached) {
    value = *attached;
  } else if (*i + 1 < words.size() && words[*i + 1].rfind("--", 0) != 0) {
    value = words[++*i];
  } else if (*i + 1 < words.size()) {  // "--srun-arg --cpu-bind=cores": the value looks like an option
    throw UsageError(explain(who + " needs a value", "the next word, " + words[*i + 1] + ", is taken for an option",
                             "write --" + o.name + "=" + words[*i + 1] + " if that is its value"));
  } else {
    throw UsageError(explain(who + " needs a value", "nothing follows it",
                             "write " + spelled + " " + o.value + "; see " + full_name(tool, c) + " --help"));
  }
  if (!o.value.empty() && value.empty())
    throw UsageError(explain(who + " needs a value, not an empty word", "",
                             "write " + spelled + " " + o.value + "; see " + full_name(tool, c) + " --help"));
  a->values[o.name].push_back(value);
  a->spelled[o.name] = spelled;
}

void check_positional(const Tool& tool, const Command& c, const Args& a) {
  const std::size_t n = a.positional.size();
  const std::string thing = c.args_name.empty() ? "argument" : c.args_name;
  if (n < c.min_args)
    throw UsageError(explain(full_name(tool, c) + ": no " + thing + " given", "", "name the " + thing + "; see " + full_name(tool, c) + " --help"));
  if (n > c.max_args) {
    const std::string extra = a.positional[c.max_args];
    throw UsageError(explain(full_name(tool, c) + ": unexpected argument '" + extra + "'",
                             c.max_args == 0 ? "it takes no arguments"
                                             : "it takes " + std::string(c.max_args == 1 ? "one " : "at most " + std::to_string(c.max_args) + " ") + thing,
                             "quote an argument with spaces; see " + full_name(tool, c) + " --help"));
  }
}

// `message` as the contract prints it: after the tool's name (and command's, when it has
// not named its tool itself: "saker-sweep run: the sweep file ... changed").
std::string named(const Tool& tool, const Command* c, const std::string& message) {
  if (message.rfind(tool.name, 0) == 0) return message;
  return (c != nullptr ? full_name(tool, *c) : tool.name) + ": " + message;
}

}  // namespace

std::string Args::spelling(const std::string& name) const {
  const auto it = spelled.find(name);
  return it != spelled.end() ? it->second : "--" + name;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  return has(name) ? values.at(name).back() : fallback;
}

double Args::real(const std::string& name, double fallback, double min, double max) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || errno != 0 || !std::isfinite(v) || !(v >= min && v <= max)) {
    const bool open = std::isinf(max);
    const std::string bounds = open ? shortest(min) + " or more" : "from " + shortest(min) + " to " + shortest(max);
    throw UsageError(explain(command + ": " + spelling(name) + " is '" + text + "'",
                             "it must be a number" + std::string(open ? ", " : " ") + bounds,
                             "pass " + spelling(name) + (open ? " " : " X ") + bounds));
  }
  return v;
}

std::string Args::required(const std::string& name) const {
  if (!has(name)) throw UsageError(explain(command + ": --" + name + " is missing", "this command needs it", "see " + command + " --help"));
  return get(name);
}

const std::vector<std::string>& Args::all(const std::string& name) const {
  static const std::vector<std::string> none;
  return has(name) ? values.at(name) : none;
}

std::uint64_t Args::number(const std::string& name, std::uint64_t fallback, std::uint64_t min, std::uint64_t max) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  const bool whole = !text.empty() && text[0] != '-' && end != nullptr && *end == '\0' && errno == 0;
  if (!whole || v < min || v > max) {
    const std::string bounds = max != UINT64_MAX ? "from " + std::to_string(min) + " to " + std::to_string(max)
                                                 : std::to_string(min) + " or more";
    throw UsageError(explain(command + ": " + spelling(name) + " is '" + text + "'",
                             "it must be a whole number" + std::string(max != UINT64_MAX ? " " : ", ") + bounds,
                             "pass " + spelling(name) + (max != UINT64_MAX ? " N " + bounds : " " + bounds)));
  }
  return v;
}

std::string closest(const std::string& typed, const std::vector<std::string>& candidates) {
  const std::size_t allowed = std::max<std::size_t>(1, std::min<std::size_t>(2, typed.size() / 3));
  std::string best;
  std::size_t best_score = allowed + 1;
  for (const std::string& c : candidates) {
    const bool abbreviation = typed.size() >= 2 && c.rfind(typed, 0) == 0;
    const std::size_t score = abbreviation ? 0 : distance(typed, c);
    if (score < best_score) best = c, best_score = score;
  }
  return best;
}

std::string usage(const Tool& tool) {
  if (single(tool)) return tool.name + ": " + tool.what + "\n\n" + usage(tool, tool.commands[0]) + (tool.footer.empty() ? "" : "\n" + tool.footer);
  std::string s = tool.name + ": " + tool.what + "\n\nUsage:\n";
  for (const Command& c : tool.commands)
    s += pad("  " + full_name(tool, c) + " " + c.synopsis, 44) + " " + wrap(first_sentence(c.what), 110, 45) + "\n";
  s += pad("  " + tool.name + " COMMAND --help", 44) + " one command's options\n";
  s += "  " + tool.name + " --help | --version\n";
  if (!tool.footer.empty()) s += "\n" + tool.footer;
  return s;
}

std::string usage(const Tool& tool, const Command& c) {
  std::string s = "Usage: " + full_name(tool, c) + " " + c.synopsis + "\n  " + wrap(c.what, 100, 2) + "\n";
  if (!visible(c).empty()) s += "Options:\n";
  for (const Option* o : visible(c)) s += pad("  " + option_text(*o), 30) + " " + wrap(o->help, 110, 31) + "\n";
  return s;
}

const Command& find_command(const Tool& tool, const std::vector<std::string>& words, std::size_t* used) {
  // Two-word commands ("audit verify") first, so that "audit" alone is not taken for one.
  for (const Command& c : tool.commands) {
    const std::size_t space = c.name.find(' ');
    if (space != std::string::npos && words.size() >= 2 && words[0] == c.name.substr(0, space) &&
        words[1] == c.name.substr(space + 1)) {
      *used = 2;
      return c;
    }
  }
  for (const Command& c : tool.commands)
    if (!words.empty() && words[0] == c.name) {
      *used = 1;
      return c;
    }
  std::vector<std::string> names;
  for (const Command& c : tool.commands) names.push_back(c.name);
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  const std::string fix = "the commands are " + known + "; see " + tool.name + " --help";
  if (words.empty()) throw UsageError(explain(tool.name + ": no command given", "", fix));
  if (words[0].size() > 1 && words[0][0] == '-') {  // "--quik": an option where a command goes
    const std::string name = words[0].substr(words[0].rfind("--", 0) == 0 ? 2 : 1);
    const std::string guess = closest(name, {"help", "version"});
    throw UsageError(explain(tool.name + ": unknown option " + words[0] + (guess.empty() ? "" : "; did you mean --" + guess + "?"),
                             "only --help and --version come before the command", fix));
  }
  std::string typed = words[0];
  // "audit chekc": the first word of a two-word command is right, so judge the pair.
  const bool family = std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(typed + " ", 0) == 0; });
  if (family && words.size() < 2)
    throw UsageError(explain(tool.name + ": '" + typed + "' needs one more word", "it is the start of a command", fix));
  if (family) typed += " " + words[1];
  std::string guess = closest(typed, names);
  // Words people type for a command that has a shorter name here (only when it exists).
  static const std::vector<std::pair<std::string, std::string>> kSynonyms = {
      {"list", "ls"}, {"dir", "ls"}, {"info", "show"}, {"inspect", "show"}, {"cat", "show"},
      {"check", "verify"}, {"validate", "check"}, {"rm", "prune"}, {"delete", "prune"}, {"clean", "prune"},
      {"search", "find"}, {"stat", "status"}, {"state", "status"}};
  for (const auto& [word, command] : kSynonyms)
    if (guess.empty() && typed == word && std::find(names.begin(), names.end(), command) != names.end()) guess = command;
  throw UsageError(explain(tool.name + ": unknown command '" + typed + "'" + (guess.empty() ? "" : "; did you mean '" + guess + "'?"),
                           "", fix));
}

Args parse(const Tool& tool, const Command& c, const std::vector<std::string>& words) {
  Args a;
  a.command = full_name(tool, c);
  bool options = true;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (options && w == "--") {
      options = false;
    } else if (options && (w == "--help" || w == "-h")) {
      a.help = true;
    } else if (options && w.size() > 1 && w[0] == '-' && w[1] != '-') {  // -n 4, -n4
      const auto o = std::find_if(c.options.begin(), c.options.end(), [&](const Option& x) { return x.letter == w[1]; });
      if (o == c.options.end()) throw UsageError(unknown_option(tool, c, w, w.substr(1)));
      std::optional<std::string> attached;
      if (w.size() > 2) attached = w.substr(2);
      take_option(tool, c, *o, words, &i, w.substr(0, 2), attached, &a);
    } else if (options && w.size() > 2 && w[0] == '-') {
      const std::size_t eq = w.find('=');
      const std::string name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      const auto o = std::find_if(c.options.begin(), c.options.end(), [&](const Option& x) { return x.name == name; });
      if (o == c.options.end()) throw UsageError(unknown_option(tool, c, eq == std::string::npos ? w : w.substr(0, eq), name));
      std::optional<std::string> attached;
      if (eq != std::string::npos) attached = w.substr(eq + 1);
      take_option(tool, c, *o, words, &i, "--" + name, attached, &a);
    } else {
      a.positional.push_back(w);
      if (c.program_args) options = false;  // PROGRAM: the rest is its command line
    }
  }
  if (!a.help) check_positional(tool, c, a);
  return a;
}

int main(const Tool& tool, int argc, char** argv, const Runner& run, std::ostream& out, std::ostream& err) {
  return main(tool, std::vector<std::string>(argv + 1, argv + argc), run, out, err);
}

int main(const Tool& tool, const std::vector<std::string>& words, const Runner& run, std::ostream& out,
         std::ostream& err) {
  if (!words.empty() && words[0] == "--version") {
    out << version_line(tool.name) << "\n";
    return kOk;
  }
  if (!words.empty() && (words[0] == "--help" || words[0] == "-h" || (!single(tool) && words[0] == "help"))) {
    out << usage(tool);
    return kOk;
  }
  const Command* command = single(tool) ? &tool.commands[0] : nullptr;
  try {
    std::size_t used = 0;
    if (command == nullptr) command = &find_command(tool, words, &used);
    const Args args = parse(tool, *command, {words.begin() + static_cast<std::ptrdiff_t>(used), words.end()});
    if (args.help) {
      out << (single(tool) ? usage(tool) : usage(tool, *command));
      return kOk;
    }
    return run(*command, args);
  } catch (const UsageError& e) {
    err << kErrorPrefix << named(tool, command, e.what()) << "\n";
    if (command != nullptr) err << "usage: " << full_name(tool, *command) << " " << command->synopsis << "\n";
    return kUsage;
  } catch (const Failure& e) {
    out.flush();
    err << kErrorPrefix << named(tool, command, e.what()) << "\n";
    return e.code;
  } catch (const std::exception& e) {
    err << kErrorPrefix << (command != nullptr ? full_name(tool, *command) : tool.name) << ": " << e.what() << "\n";
    return kFailed;
  }
}

}  // namespace saker::cli
