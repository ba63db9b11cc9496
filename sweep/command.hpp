// The command each trial runs: words with {placeholders}, filled per trial and segment.
// No shell is involved, so a value can never become shell syntax.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace saker::sweep {

// Placeholders saker-sweep fills itself (parameters may not use these names).
inline const std::set<std::string> kBuiltinPlaceholders = {"budget", "ckpt_dir", "metrics", "trial", "sweep"};

class CommandTemplate {
 public:
  struct Piece {
    bool placeholder = false;
    std::string text;  // literal text, or the placeholder's name
  };
  using Word = std::vector<Piece>;

  // Splits on whitespace ('{{' and '}}' are literal braces). Throws saker::Error with
  // the column (1-based, in `text`) of an unbalanced brace or empty placeholder name.
  static CommandTemplate parse_string(const std::string& text);
  // One word per item (spaces kept inside a word).
  static CommandTemplate parse_words(const std::vector<std::string>& words);

  const std::vector<Word>& words() const { return words_; }
  std::set<std::string> placeholders() const;
  // Fills every placeholder from `values`; throws saker::Error naming a missing one.
  std::vector<std::string> render(const std::map<std::string, std::string>& values) const;
  // The rendered words as one line for people, quoting words a shell would split.
  static std::string shell_line(const std::vector<std::string>& argv);

 private:
  static Word parse_word(const std::string& word, std::size_t column);
  std::vector<Word> words_;
};

}  // namespace saker::sweep
