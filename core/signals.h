// Graceful stop on SIGINT/SIGTERM: the handler only sets an atomic flag; long loops (training)
// poll stop_requested() between steps, checkpoint and exit 128 + signal (130 / 143).
// A second signal while a stop is pending exits at once (_exit(128 + signal)), unless it arrives within a second of
// the first (one request delivered twice, e.g. by coreutils `timeout`).
#pragma once

namespace mnemo {

void install_stop_handlers();  // SIGINT and SIGTERM; idempotent
bool stop_requested();
int stop_signal();                    // the first signal received (0 if none)
const char* stop_signal_name();       // "SIGINT", "SIGTERM", "signal N" or "" (none)
void request_stop(int signal_number);  // as if the signal had arrived (tests, parent processes)
void clear_stop_request();             // tests

}  // namespace mnemo
