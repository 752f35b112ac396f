// milrt: the command-line interface. A thin layer over the library: parse
// arguments, call the library, print results; every error is one line on
// stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "milrt/error.h"

namespace {
// Errors are one line whatever a file name or string literal inside them holds.
void print_error(const std::string& msg) {
  std::string line;
  for (char c : msg) {
    if (c == '\n') line += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      line += hex;
    }
    else line += c;
  }
  if (line.find("error:") == std::string::npos) line = "error: " + line;
  std::fprintf(stderr, "%s\n", line.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"milrt: compile, run and train Core ML MIL programs on CPUs"};
  app.require_subcommand(1);
  milrt::cli::add_check(app);
  milrt::cli::add_run(app);
  milrt::cli::add_print(app);
  milrt::cli::add_opt(app);
  milrt::cli::add_inspect(app);
  milrt::cli::add_bench(app);
  milrt::cli::add_grad(app);
  milrt::cli::add_train(app);
  milrt::cli::add_generate(app);
  milrt::cli::add_export(app);
  milrt::cli::add_convert(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's own verdict, e.g. --tolerance exceeded
    return e.get_exit_code();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(std::string("error: ") + e.what() + " (see milrt --help)");
    return 2;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 2;
  }
  return 0;
}
