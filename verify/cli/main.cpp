// `flashref`: the command line of the reference and verifier. Each subcommand lives in its
// own cmd_*.cpp; to add one, declare its add_* in command.hpp and list it below.
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "command.hpp"
#include "feasibility.hpp"
#include "flashref/error.hpp"

int main(int argc, char** argv) {
  using namespace flashref::cli;
  CLI::App app{"flashref: the reference and verifier for FlashAttention-2", "flashref"};
  app.require_subcommand(1);
  const std::vector<Command> commands = {
      add_verify_command(app), add_bench_command(app), add_run_command(app),
      add_check_command(app),  add_fuzz_command(app),  add_trace_command(app),
  };
  // CLI11 reports a word that names no subcommand as "A subcommand is required"; say what it is.
  std::string names;
  bool known = false;
  for (const Command& command : commands) {
    names += (names.empty() ? "" : ", ") + command.app->get_name();
    known = known || (argc > 1 && command.app->check_name(argv[1]));
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "flashref: error: unknown subcommand '" << argv[1] << "' (the subcommands: "
              << names << ")\nrun 'flashref --help' for usage\n";
    return kExitUsage;
  }
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
      check_omp_environment();  // OMP_NUM_THREADS above kMaxThreads (feasibility.hpp)
      return command.run();
    } catch (const std::bad_alloc&) {
      // The feasibility check estimates from above, but an estimate can miss: say what it is.
      std::cerr << prefix
                << "error: out of memory (std::bad_alloc): the problem needs more memory than "
                   "this machine could give; give a smaller problem (--shape, --threads)\n";
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
