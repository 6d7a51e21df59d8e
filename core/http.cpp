#include "core/http.h"

#ifdef MNEMO_WITH_CURL
#include <curl/curl.h>
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "core/signals.h"

namespace mnemo {

#ifdef MNEMO_WITH_CURL
namespace {

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl: curl_global_init failed");
  });
}

struct Transfer {
  std::string body;
  size_t cap = 0;
  bool too_large = false;
  std::string retry_after;  // of the last response (a redirect's headers come first)
  std::string error_code;
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  if (t->body.size() + bytes > t->cap) {
    t->too_large = true;
    return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
  }
  t->body.append(data, bytes);
  return bytes;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect): forget the previous one's headers
    t->retry_after.clear();
    t->error_code.clear();
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name == "retry-after") t->retry_after = trim(line.substr(colon + 1));
    if (name == "x-error-code") t->error_code = trim(line.substr(colon + 1));
  }
  return size * count;
}

int on_progress_stop(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) { return stop_requested() ? 1 : 0; }

const char* reason_phrase(long status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 410: return "Gone";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
  }
}

// One line of what the server said: the "error" text of a JSON body, else the start of the body.
std::string server_says(const std::string& body) {
  std::string text;
  try {
    const json j = json::parse(body);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) text = j["error"].get<std::string>();
  } catch (const json::exception&) {
  }
  if (text.empty() && body.find('<') == std::string::npos) text = body;  // not an HTML error page
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  text = trim(text);
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  return text;
}

bool retryable_status(long status) { return status == 408 || status == 429 || status >= 500; }

bool retryable_curl_error(CURLcode code) {
  switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_WRITE_ERROR:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_NOT_BUILT_IN: return false;
    default: return true;  // connection refused or reset, timeouts, a body cut short (CURLE_PARTIAL_FILE), DNS hiccups
  }
}

// Sleeps `seconds`, waking early on a stop request; false if stopped.
bool wait_unless_stopped(double seconds) {
  const double end = wall_seconds() + seconds;
  for (double now = wall_seconds(); now < end; now = wall_seconds()) {
    if (stop_requested()) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.05, end - now)));
  }
  return !stop_requested();
}

struct EasyHandle {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  ~EasyHandle() {
    if (headers) curl_slist_free_all(headers);
    if (h) curl_easy_cleanup(h);
  }
};

// The options every GET shares: redirects, user agent, timeouts, a stall limit, the request headers, the error
// buffer and the stop-request hook; the caller adds its body and header callbacks.
void set_common_options(EasyHandle& e, const std::string& url, const HttpOptions& options, long timeout_s,
                        char* errbuf) {
  for (const std::string& h : options.headers) e.headers = curl_slist_append(e.headers, h.c_str());
  curl_easy_setopt(e.h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e.h, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(e.h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e.h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(e.h, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(e.h, CURLOPT_USERAGENT, "mnemo/" MNEMO_VERSION);
  curl_easy_setopt(e.h, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_s);
  curl_easy_setopt(e.h, CURLOPT_TIMEOUT, timeout_s);
  curl_easy_setopt(e.h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e.h, CURLOPT_LOW_SPEED_TIME, options.low_speed_time_s);
  curl_easy_setopt(e.h, CURLOPT_HTTPHEADER, e.headers);
  curl_easy_setopt(e.h, CURLOPT_XFERINFOFUNCTION, on_progress_stop);
  curl_easy_setopt(e.h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e.h, CURLOPT_ERRORBUFFER, errbuf);
}

// Before retry `attempt` + 1: base * 2^attempt seconds, at least a numeric Retry-After, at most backoff_max_s; the
// retry is announced through on_retry (`what_next` says where it continues, if anywhere). False if a stop request
// ended the wait.
bool wait_before_retry(const HttpOptions& options, const std::string& where, int attempt,
                       const std::string& retry_after, const std::string& what_next, const std::string& failure) {
  double wait = options.backoff_base_s * std::pow(2.0, attempt);
  if (!retry_after.empty() && retry_after.size() < 10 &&
      std::all_of(retry_after.begin(), retry_after.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
    wait = std::max(wait, std::stod(retry_after));
  wait = std::min(wait, options.backoff_max_s);
  if (options.on_retry) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, wait < 10 ? "%.1f" : "%.0f", wait);
    options.on_retry(where + ": retrying in " + seconds + " s (attempt " + std::to_string(attempt + 2) + " of " +
                     std::to_string(options.max_retries + 1) + what_next + "): " + failure);
  }
  return wait_unless_stopped(wait);
}

}  // namespace
#endif  // MNEMO_WITH_CURL

bool http_available() {
#ifdef MNEMO_WITH_CURL
  return true;
#else
  return false;
#endif
}

std::string url_encode(const std::string& value) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

#ifndef MNEMO_WITH_CURL
HttpDownload http_download(const std::string& url, const std::string&, const HttpOptions& options,
                           const std::function<void(int64_t, int64_t)>&) {
  http_get(url, options);  // throws: no libcurl
  return {};
}
HttpResponse http_get(const std::string& url, const HttpOptions&) {
  throw Error("GET " + url +
              ": this mnemo was built without libcurl (cmake -DMNEMO_CURL=OFF); build it with "
              "libcurl (Debian libcurl4-openssl-dev), or fetch on a machine that has it and copy the files");
}
#else
HttpResponse http_get(const std::string& url, const HttpOptions& options) {
  init_curl_once();
  const std::string where = "GET " + url;
  HttpResponse response;
  for (int attempt = 0;; ++attempt) {
    if (stop_requested()) throw HttpError(where + ": interrupted by " + stop_signal_name(), 0, "", /*stopped=*/true);
    EasyHandle e;
    if (!e.h) throw Error(where + ": libcurl: curl_easy_init failed");
    Transfer t;
    t.cap = options.max_body_bytes;
    char errbuf[CURL_ERROR_SIZE] = {0};
    set_common_options(e, url, options, options.timeout_s, errbuf);
    curl_easy_setopt(e.h, CURLOPT_ACCEPT_ENCODING, "");  // whatever libcurl can decode (gzip, ...)
    curl_easy_setopt(e.h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e.h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e.h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e.h, CURLOPT_HEADERDATA, &t);

    const CURLcode rc = curl_easy_perform(e.h);
    response.attempts = attempt + 1;
    long status = 0;
    curl_easy_getinfo(e.h, CURLINFO_RESPONSE_CODE, &status);
    const std::string after = attempt > 0 ? " (after " + std::to_string(attempt + 1) + " attempts)" : std::string();

    std::string failure;  // empty: a 2xx answer
    bool retry = false;
    if (rc == CURLE_ABORTED_BY_CALLBACK && stop_requested()) {
      throw HttpError(where + ": interrupted by " + stop_signal_name(), 0, "", /*stopped=*/true);
    } else if (t.too_large) {
      throw HttpError(where + ": the response is larger than " + std::to_string(options.max_body_bytes >> 20) +
                          " MiB, more than a page of rows should be",
                      status, t.error_code);
    } else if (rc != CURLE_OK) {
      failure = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : std::string());
      if (rc == CURLE_OPERATION_TIMEDOUT && std::string(errbuf).find("too slow") != std::string::npos)
        failure = "the server sent nothing for " + std::to_string(options.low_speed_time_s) + " s (stalled; " + failure + ")";
      retry = retryable_curl_error(rc);
      status = 0;
    } else if (status < 200 || status >= 300) {
      const std::string reason = reason_phrase(status);
      const std::string says = server_says(t.body);
      failure = "HTTP " + std::to_string(status) + (reason.empty() ? "" : " (" + reason + ")") +
                (says.empty() ? "" : ": " + says);
      retry = retryable_status(status);
    }
    if (failure.empty()) {
      response.status = status;
      response.body = std::move(t.body);
      response.error_code = t.error_code;
      return response;
    }
    if (!retry || attempt >= options.max_retries) throw HttpError(where + ": " + failure + after, status, t.error_code);
    if (!wait_before_retry(options, where, attempt, t.retry_after, "", failure))
      throw HttpError(where + ": interrupted by " + stop_signal_name(), 0, "", /*stopped=*/true);
  }
}

namespace {

struct FileTransfer {
  CURL* handle = nullptr;
  std::FILE* out = nullptr;
  int64_t offset = 0;          // bytes in the file when this request started
  int64_t written = 0;         // bytes of this answer written
  int64_t expected = -1;       // the whole file's size, when the answer says it
  bool checked_status = false;
  bool to_file = false;        // a 200/206 answer: the body goes to the file
  bool io_error = false;
  std::string error_body;      // the start of a non-2xx answer's body
  std::map<std::string, std::string> headers;
  std::string retry_after;
  const std::function<void(int64_t, int64_t)>* on_progress = nullptr;
};

size_t on_file_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<FileTransfer*>(user);
  const std::string line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) t->headers.clear();  // a redirect's headers come first
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    t->headers[name] = trim(line.substr(colon + 1));
    if (name == "retry-after") t->retry_after = t->headers[name];
  }
  return size * count;
}

size_t on_file_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<FileTransfer*>(user);
  const size_t bytes = size * count;
  if (!t->checked_status) {
    t->checked_status = true;
    long status = 0;
    curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
    t->to_file = status == 200 || status == 206;
    if (status == 200 && t->offset > 0) {  // the whole file again: start it over
      if (std::fflush(t->out) != 0 || ::ftruncate(::fileno(t->out), 0) != 0 || std::fseek(t->out, 0, SEEK_SET) != 0) {
        t->io_error = true;
        return 0;
      }
      t->offset = 0;
    }
    auto length = t->headers.find("content-length");
    if (t->to_file && length != t->headers.end() && !length->second.empty() &&
        std::all_of(length->second.begin(), length->second.end(), [](unsigned char c) { return std::isdigit(c); }))
      t->expected = t->offset + std::stoll(length->second);
  }
  if (!t->to_file) {
    if (t->error_body.size() < 65536) t->error_body.append(data, std::min(bytes, 65536 - t->error_body.size()));
    return bytes;
  }
  if (std::fwrite(data, 1, bytes, t->out) != bytes) {
    t->io_error = true;
    return 0;
  }
  t->written += static_cast<int64_t>(bytes);
  if (t->on_progress && *t->on_progress) (*t->on_progress)(t->offset + t->written, t->expected);
  return bytes;
}

int64_t file_size_or_zero(const std::string& file) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

}  // namespace

HttpDownload http_download(const std::string& url, const std::string& file, const HttpOptions& options,
                           const std::function<void(int64_t, int64_t)>& on_progress) {
  init_curl_once();
  const std::string where = "GET " + url;
  HttpDownload result;
  for (int attempt = 0;; ++attempt) {
    if (stop_requested()) throw HttpError(where + ": interrupted by " + stop_signal_name(), 0, "", /*stopped=*/true);
    EasyHandle e;
    if (!e.h) throw Error(where + ": libcurl: curl_easy_init failed");
    FileTransfer t;
    t.handle = e.h;
    t.on_progress = &on_progress;
    t.offset = file_size_or_zero(file);
    t.out = std::fopen(file.c_str(), "ab");
    if (!t.out) throw Error("cannot write " + file + ": " + std::strerror(errno));
    char errbuf[CURL_ERROR_SIZE] = {0};
    // No whole-transfer timeout: a large file takes as long as it takes; a stall still ends it.
    set_common_options(e, url, options, 0L, errbuf);
    const std::string range = std::to_string(t.offset) + "-";  // Range: bytes=N-
    if (t.offset > 0) curl_easy_setopt(e.h, CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(e.h, CURLOPT_WRITEFUNCTION, on_file_body);
    curl_easy_setopt(e.h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e.h, CURLOPT_HEADERFUNCTION, on_file_header);
    curl_easy_setopt(e.h, CURLOPT_HEADERDATA, &t);

    const CURLcode rc = curl_easy_perform(e.h);
    const bool closed = std::fclose(t.out) == 0;
    result.attempts = attempt + 1;
    long status = 0;
    curl_easy_getinfo(e.h, CURLINFO_RESPONSE_CODE, &status);
    const std::string after = attempt > 0 ? " (after " + std::to_string(attempt + 1) + " attempts)" : std::string();
    if (t.io_error || !closed) throw Error("cannot write " + file + ": " + std::strerror(errno) + " (disk full?)");

    std::string failure;
    bool retry = false;
    if (rc == CURLE_ABORTED_BY_CALLBACK && stop_requested()) {
      throw HttpError(where + ": interrupted by " + stop_signal_name(), 0, "", /*stopped=*/true);
    } else if (rc != CURLE_OK) {
      failure = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : std::string());
      retry = retryable_curl_error(rc);
      status = 0;
    } else if (status != 200 && status != 206) {
      const std::string reason = reason_phrase(status);
      const std::string says = server_says(t.error_body);
      failure = "HTTP " + std::to_string(status) + (reason.empty() ? "" : " (" + reason + ")") +
                (says.empty() ? "" : ": " + says);
      retry = retryable_status(status);
    }
    if (failure.empty()) {
      result.status = status;
      result.bytes = file_size_or_zero(file);
      result.headers = std::move(t.headers);
      return result;
    }
    if (!retry || attempt >= options.max_retries) {
      auto error_code = t.headers.find("x-error-code");
      throw HttpError(where + ": " + failure + after, status,
                      error_code == t.headers.end() ? std::string() : error_code->second);
    }
    const std::string from_byte = ", from byte " + std::to_string(file_size_or_zero(file));
    if (!wait_before_retry(options, where, attempt, t.retry_after, from_byte, failure))
      throw HttpError(where + ": interrupted by " + stop_signal_name(), 0, "", /*stopped=*/true);
  }
}

#endif  // MNEMO_WITH_CURL

}  // namespace mnemo
