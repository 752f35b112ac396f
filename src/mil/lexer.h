// Tokens of MIL text.
#pragma once
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt::mil {

enum class Tok { Ident, Number, String, Punct, Arrow, End };

struct Token {
  Tok kind;
  std::string text;   // identifier, number as written, unescaped string, or punctuation char
  int line, col;
};

// Splits MIL text into tokens; throws Error "path:line:col: error: ..." on a
// character that starts no token or an unterminated string.
std::vector<Token> lex(const std::string& text, const std::string& path);

}  // namespace milrt::mil
