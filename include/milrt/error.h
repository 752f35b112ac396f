// The one error type of the library: a message that already says where.
#pragma once
#include <stdexcept>
#include <string>

namespace milrt {

// Thrown by every library entry point on bad input. what() is one line, of the
// form "path:line:col: error: ..." for text, or names the op / value / file.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace milrt
