// A small HTTP(S) GET over libcurl's easy API, for `mnemo data fetch`: timeouts, a status check, retries with
// exponential backoff on 429 / 5xx / connection errors (a Retry-After header is honoured), and a cap on the body.
// A stop request (SIGINT / SIGTERM, core/signals.h) aborts a transfer or a backoff wait at once.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/common.h"

namespace mnemo {

struct HttpOptions {
  long connect_timeout_s = 30;
  long timeout_s = 600;                       // the whole transfer
  long low_speed_time_s = 60;                 // abort when under 1 byte/s for this long (a stalled connection;
                                              // `data fetch --stall-timeout`)
  int max_retries = 5;                        // attempts after the first, on a retryable failure
  double backoff_base_s = 1.0;                // wait base * 2^k before retry k+1 (0 in the tests)
  double backoff_max_s = 60.0;                // cap on one wait, Retry-After included
  size_t max_body_bytes = size_t(512) << 20;  // a larger body is an error, not a retry
  std::vector<std::string> headers;           // extra request headers, "Name: value"
  // Called before each backoff wait with "GET <url>: retrying in N s (attempt k of n): <why>", so a retry is never
  // silent; none if empty.
  std::function<void(const std::string&)> on_retry;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::string error_code;  // the X-Error-Code response header, if any (the datasets-server sets it on errors)
  int attempts = 0;        // requests made, retries included
};

// A request that ended without a 2xx answer: the final HTTP status (0 when no HTTP answer came: connection error,
// timeout, truncated body), after the retries. The message names the URL and says what happened.
class HttpError : public Error {
 public:
  HttpError(const std::string& what, long status, std::string error_code, bool stopped = false)
      : Error(what), status(status), error_code(std::move(error_code)), stopped(stopped) {}
  long status;
  std::string error_code;
  bool stopped;  // aborted by a stop request (SIGINT / SIGTERM), not a failure of the server
};

// GET `url`; the 2xx response, or HttpError. 3xx redirects are followed. A body with a JSON {"error": "..."} (the
// datasets-server's error form) has that text in the message.
HttpResponse http_get(const std::string& url, const HttpOptions& options);

// GET `url` into `file`, for files too large to hold in memory (model weights). When the file already holds
// `file`'s first bytes (a download cut short), the request asks for the rest (Range: bytes=N-): a 206 answer is
// appended, a 200 answer (a server without ranges) replaces the file. A transfer that breaks off is retried like
// http_get, from the bytes already written; no body cap. Response headers of the final answer are returned with
// lower-case names. `on_progress(bytes in the file, expected total or -1)` is called as data arrives.
struct HttpDownload {
  long status = 0;
  int64_t bytes = 0;  // the file's size at the end
  int attempts = 0;
  std::map<std::string, std::string> headers;
};
HttpDownload http_download(const std::string& url, const std::string& file, const HttpOptions& options,
                           const std::function<void(int64_t done, int64_t total)>& on_progress = {});

// False in a build without libcurl (cmake -DMNEMO_CURL=OFF): http_get then throws Error saying so.
bool http_available();

// Percent-encoding of a query-string value (RFC 3986 unreserved characters and '/' kept).
std::string url_encode(const std::string& value);

}  // namespace mnemo
