#include "sweep/command.hpp"

#include "common/error.hpp"

namespace saker::sweep {

CommandTemplate::Word CommandTemplate::parse_word(const std::string& word, std::size_t column) {
  Word out;
  std::string literal;
  for (std::size_t i = 0; i < word.size(); ++i) {
    const char c = word[i];
    if ((c == '{' || c == '}') && i + 1 < word.size() && word[i + 1] == c) {
      literal += c;
      ++i;
    } else if (c == '{') {
      const std::size_t close = word.find('}', i);
      const std::string name = close == std::string::npos ? "" : word.substr(i + 1, close - i - 1);
      if (close == std::string::npos || name.empty() || name.find('{') != std::string::npos)
        throw Error("column " + std::to_string(column + i) + ": '{' without a placeholder name and '}'" +
                    "; write {name} for a value, {{ for a literal brace");
      if (!literal.empty()) out.push_back({false, std::move(literal)});
      literal.clear();
      out.push_back({true, name});
      i = close;
    } else if (c == '}') {
      throw Error("column " + std::to_string(column + i) + ": '}' without '{'; write }} for a literal brace");
    } else {
      literal += c;
    }
  }
  if (!literal.empty() || out.empty()) out.push_back({false, std::move(literal)});
  return out;
}

CommandTemplate CommandTemplate::parse_string(const std::string& text) {
  CommandTemplate t;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) != 0) ++i;
    const std::size_t start = i;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) == 0) ++i;
    if (i > start) t.words_.push_back(parse_word(text.substr(start, i - start), start + 1));
  }
  return t;
}

CommandTemplate CommandTemplate::parse_words(const std::vector<std::string>& words) {
  CommandTemplate t;
  for (const auto& w : words) t.words_.push_back(parse_word(w, 1));
  return t;
}

std::set<std::string> CommandTemplate::placeholders() const {
  std::set<std::string> out;
  for (const Word& w : words_)
    for (const Piece& p : w)
      if (p.placeholder) out.insert(p.text);
  return out;
}

std::vector<std::string> CommandTemplate::render(const std::map<std::string, std::string>& values) const {
  std::vector<std::string> argv;
  for (const Word& w : words_) {
    std::string word;
    for (const Piece& p : w) {
      if (!p.placeholder) {
        word += p.text;
        continue;
      }
      const auto it = values.find(p.text);
      if (it == values.end())
        throw Error(explain("the command's placeholder {" + p.text + "} has no value", "it is neither a parameter "
                            "of the space nor one of {budget} {ckpt_dir} {metrics} {trial} {sweep}",
                            "fix the command in the sweep file"));
      word += it->second;
    }
    argv.push_back(std::move(word));
  }
  return argv;
}

std::string CommandTemplate::shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& w : argv) {
    bool plain = !w.empty();
    for (char c : w)
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) != 0 || std::string_view("@%+=:,./-_").find(c) !=
                                                                                std::string_view::npos);
    if (!line.empty()) line += ' ';
    if (plain) {
      line += w;
    } else {
      line += '\'';
      for (char c : w) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
      line += '\'';
    }
  }
  return line;
}

}  // namespace saker::sweep
