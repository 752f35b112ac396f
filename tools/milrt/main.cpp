// milrt: the command-line interface. A thin layer over the library: parse
// arguments, call the library, print results; every error is one line on
// stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "milrt/error.h"

int main(int argc, char** argv) {
  CLI::App app{"milrt: compile, run and train Core ML MIL programs on CPUs"};
  app.require_subcommand(1);
  milrt::cli::add_check(app);
  milrt::cli::add_run(app);
  milrt::cli::add_print(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's own verdict, e.g. --tolerance exceeded
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const milrt::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
