// `flashref`: the command line of the reference and verifier. Each subcommand lives in its
// own cmd_*.cpp; to add one, declare its add_* in command.hpp and list it below.
#include <iostream>
#include <vector>

#include "command.hpp"
#include "flashref/error.hpp"

int main(int argc, char** argv) {
  using namespace flashref::cli;
  CLI::App app{"flashref: the reference and verifier for FlashAttention-2", "flashref"};
  app.require_subcommand(1);
  const std::vector<Command> commands = {
      add_verify_command(app), add_bench_command(app), add_run_command(app),
      add_check_command(app),  add_fuzz_command(app),  add_trace_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help arrives as a ParseError with exit code 0; every other one is a usage error.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "flashref: error: " << e.what()
              << "\nrun 'flashref --help' or 'flashref SUBCOMMAND --help' for usage\n";
    return kExitUsage;
  }
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    const std::string prefix = "flashref " + command.app->get_name() + ": ";
    try {
      return command.run();
    } catch (const flashref::InvalidArgument& e) {
      std::cerr << prefix << "error: " << e.what() << "\n";
    } catch (const flashref::Unsupported& e) {
      std::cerr << prefix << "unavailable: " << e.what() << "\n";
    } catch (const std::exception& e) {
      std::cerr << prefix << "error: " << e.what() << "\n";
    }
    return kExitUsage;
  }
  return kExitUsage;
}
