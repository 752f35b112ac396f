#include "mil/lexer.h"

#include <cctype>

#include "milrt/error.h"

namespace milrt::mil {
namespace {
bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

[[noreturn]] void fail(const std::string& path, int line, int col, const std::string& msg) {
  throw Error(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": error: " + msg);
}
}  // namespace

std::vector<Token> lex(const std::string& s, const std::string& path) {
  std::vector<Token> out;
  size_t i = 0;
  int line = 1, col = 1;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < s.size(); ++k, ++i) {
      if (s[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
  };
  while (i < s.size()) {
    char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) { advance(1); continue; }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {  // line comment
      while (i < s.size() && s[i] != '\n') advance(1);
      continue;
    }
    int tl = line, tc = col;
    if (c == '-' && i + 1 < s.size() && s[i + 1] == '>') {
      out.push_back({Tok::Arrow, "->", tl, tc});
      advance(2);
      continue;
    }
    bool starts_number = std::isdigit(static_cast<unsigned char>(c)) || c == '.' ||
                         ((c == '-' || c == '+') && i + 1 < s.size() &&
                          (std::isdigit(static_cast<unsigned char>(s[i + 1])) || s[i + 1] == '.' ||
                           s.compare(i + 1, 3, "inf") == 0 || s.compare(i + 1, 3, "nan") == 0));
    if (starts_number) {
      size_t j = i;
      if (s[j] == '-' || s[j] == '+') ++j;
      if (s.compare(j, 3, "inf") == 0 || s.compare(j, 3, "nan") == 0) {
        j += 3;
      } else {
        bool hex = s.compare(j, 2, "0x") == 0 || s.compare(j, 2, "0X") == 0;
        if (hex) j += 2;
        while (j < s.size()) {
          char d = s[j];
          bool exp_mark = hex ? (d == 'p' || d == 'P') : (d == 'e' || d == 'E');
          if (exp_mark) {
            ++j;
            if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
            continue;
          }
          if (std::isdigit(static_cast<unsigned char>(d)) || d == '.' ||
              (hex && std::isxdigit(static_cast<unsigned char>(d)))) { ++j; continue; }
          break;
        }
      }
      out.push_back({Tok::Number, s.substr(i, j - i), tl, tc});
      advance(j - i);
      continue;
    }
    if (ident_start(c)) {
      size_t j = i;
      while (j < s.size() && ident_char(s[j])) ++j;
      out.push_back({Tok::Ident, s.substr(i, j - i), tl, tc});
      advance(j - i);
      continue;
    }
    if (c == '"') {
      std::string v;
      advance(1);
      while (true) {
        if (i >= s.size() || s[i] == '\n') fail(path, tl, tc, "unterminated string literal");
        char d = s[i];
        if (d == '"') { advance(1); break; }
        if (d == '\\' && i + 1 < s.size()) {
          char e = s[i + 1];
          v += e == 'n' ? '\n' : e == 't' ? '\t' : e;
          advance(2);
          continue;
        }
        v += d;
        advance(1);
      }
      out.push_back({Tok::String, v, tl, tc});
      continue;
    }
    if (std::string("()[]{}<>,=;?@").find(c) != std::string::npos) {
      out.push_back({Tok::Punct, std::string(1, c), tl, tc});
      advance(1);
      continue;
    }
    fail(path, tl, tc, std::string("unexpected character '") +
                           (std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : "\\x" + std::to_string(int(uint8_t(c)))) + "'");
  }
  out.push_back({Tok::End, "", line, col});
  return out;
}

}  // namespace milrt::mil
