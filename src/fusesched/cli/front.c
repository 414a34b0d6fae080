/*
 * The native front of the `fusesched` command: `fusesched submit FILE...` and
 * `fusesched sbatch [OPTIONS] SCRIPT` in a couple of milliseconds, for scripted loops that
 * start one process per job (as `sbatch`, a C program, is used).
 *
 * It does what the Python quick path (fusesched/cli/fast.py) does, byte for byte in what it
 * prints and value for value in what it sends: read the files, POST their text to the
 * controller's /v1/submissions on a socket of its own (the controller parses and validates
 * them) and print the ids, with the same messages and exit codes. Everything else -- every
 * other command, --help, https, a CA, several controllers, and any mistake it can find before
 * sending (a missing file, an unknown option, an unreachable controller) -- is handed to the
 * Python command by exec, so those messages are the Python command's own. Two exceptions, with
 * the Python command's own messages: a connection that timed out (handing over would wait as
 * long again) and a user with no name. Once the request has been sent it never hands over (the
 * submission may have been made).
 *
 * Built by `make` into .venv/bin/fusesched (docs/SUBMIT.md, "the native front"); without a C
 * compiler the Python script stays. FUSESCHED_NATIVE=0 sends everything to Python.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef FUSESCHED_PYTHON
#error "build with -DFUSESCHED_PYTHON='\"/path/to/venv/bin/python\"'"
#endif

#ifndef TIMEOUT_S
#define TIMEOUT_S 30 /* fast.TIMEOUT_S */
#endif
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* SIGPIPE is ignored before sending anyway */
#endif
#define DEFAULT_URL "http://127.0.0.1:8642"
#define MAX_DEPTH 1000 /* of JSON answers (Python's json stops near its recursion limit) */
#define BIG 1000000000000000000LL /* numbers from the network are counted up to this */

static char **g_argv;

/* ---- handing over to the Python command ------------------------------------------------ */

static void out_of_memory(void) {
    fputs("error: out of memory\n", stderr);
    exit(1);
}

static void *checked(void *p) {
    if (!p) out_of_memory();
    return p;
}

static void to_python(void) {
    int n = 0;
    while (g_argv[n]) n++;
    char **args = checked(calloc((size_t)n + 4, sizeof *args));
    args[0] = FUSESCHED_PYTHON;
    /* `python -P -m fusesched ARGS`: listed by ps as "python -P -m fusesched up ..." (so
     * `pgrep -f "fusesched up"` finds it), with usage lines naming `fusesched`
     * (cli/entry.py), and -P (Python >= 3.11) keeps the current directory off sys.path, as
     * for the console script: a json.py or typer.py where the user stands is not imported */
    args[1] = "-P";
    args[2] = "-m";
    args[3] = "fusesched";
    for (int i = 1; i < n; i++) args[i + 3] = g_argv[i];
    execv(FUSESCHED_PYTHON, args);
    fprintf(stderr, "error: cannot start %s: %s\n", FUSESCHED_PYTHON, strerror(errno));
    exit(1);
}

/* ---- a growing byte buffer (always NUL-terminated once it has memory) ------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static void buf_grow(Buf *b, size_t extra) {
    if (extra > SIZE_MAX / 2 - b->len) out_of_memory();
    size_t need = b->len + extra + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap *= 2;
        b->data = checked(realloc(b->data, cap));
        b->cap = cap;
    }
    b->data[b->len] = '\0';
}

static void buf_add(Buf *b, const char *s, size_t n) {
    buf_grow(b, n);
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_fmt(Buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) out_of_memory();
    buf_grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* The whole content of fd (closed); 0 on a read error. */
static int read_all(int fd, Buf *out) {
    char chunk[65536];
    buf_grow(out, 0);
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            close(fd);
            return n == 0;
        }
        buf_add(out, chunk, (size_t)n);
    }
}

/* ---- UTF-8, Python's str.strip() and repr() --------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (left > 0), strict as Python's decoder (encoded
 * surrogates too if `surrogates`, as its "surrogatepass"); 0 if invalid. */
static int utf8_seq(const unsigned char *s, size_t left, unsigned *cp, int surrogates) {
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int n;
    unsigned lo = 0x80, hi = 0xBF, v;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED && !surrogates) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)n > left) return 0;
    for (int i = 1; i < n; i++) {
        unsigned d = s[i];
        if (d < (i == 1 ? lo : 0x80) || d > (i == 1 ? hi : 0xBF)) return 0;
        v = (v << 6) | (d & 0x3F);
    }
    *cp = v;
    return n;
}

/* How many bytes at s one U+FFFD stands for where utf8_seq found no valid sequence: the
 * maximal subpart, as Python's decoder with errors="replace". */
static size_t utf8_bad(const unsigned char *s, size_t left) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t n;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 1;
    }
    size_t k = 1;
    while (k < n && k < left && s[k] >= (k == 1 ? lo : 0x80) && s[k] <= (k == 1 ? hi : 0xBF)) k++;
    return k;
}

static int utf8_valid(const char *s, size_t n, int surrogates) {
    unsigned cp;
    for (size_t i = 0; i < n;) {
        int k = utf8_seq((const unsigned char *)s + i, n - i, &cp, surrogates);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* Length of the whitespace character at s (str.isspace), 0 if it is none. */
static size_t py_space(const char *s, size_t left) {
    unsigned cp;
    int k = utf8_seq((const unsigned char *)s, left, &cp, 0);
    if (k && ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
              cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
              cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000))
        return (size_t)k;
    return 0;
}

/* str.strip(), in place. */
static char *py_strip(char *s) {
    size_t n = strlen(s), start = 0, end, k;
    while (start < n && (k = py_space(s + start, n - start))) start += k;
    end = start;
    for (size_t i = start; i < n;) {
        if ((k = py_space(s + i, n - i))) {
            i += k;
        } else {
            unsigned cp;
            int m = utf8_seq((const unsigned char *)s + i, n - i, &cp, 0);
            i += m ? (size_t)m : 1;
            end = i;
        }
    }
    s[end] = '\0';
    return s + start;
}

/* Python's bytes.strip() / bytes.split() whitespace. */
static int byte_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* repr(bytes) of the first 200 bytes of s, as Python's int() shows what it cannot read. */
static void bytes_repr(Buf *b, const char *s, size_t n) {
    if (n > 200) n = 200;
    char quote = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    buf_fmt(b, "b%c", quote);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)quote || c == '\\') buf_fmt(b, "\\%c", c);
        else if (c == '\t') buf_str(b, "\\t");
        else if (c == '\n') buf_str(b, "\\n");
        else if (c == '\r') buf_str(b, "\\r");
        else if (c < 0x20 || c >= 0x7F) buf_fmt(b, "\\x%02x", c);
        else buf_add(b, (const char *)&c, 1);
    }
    buf_add(b, &quote, 1);
}

/* repr(str) of text that str() printed as is (close to Python's: it knows no Unicode
 * database, so only the control, C1 and a few invisible characters are escaped). */
static void str_repr(Buf *b, const char *s, size_t n) {
    char quote = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    buf_add(b, &quote, 1);
    for (size_t i = 0; i < n;) {
        unsigned cp;
        int k = utf8_seq((const unsigned char *)s + i, n - i, &cp, 1);
        if (!k) { /* not from a JSON answer */
            k = 1;
            cp = (unsigned char)s[i];
        }
        if (cp == (unsigned char)quote || cp == '\\') buf_fmt(b, "\\%c", (char)cp);
        else if (cp == '\t') buf_str(b, "\\t");
        else if (cp == '\n') buf_str(b, "\\n");
        else if (cp == '\r') buf_str(b, "\\r");
        else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) buf_fmt(b, "\\x%02x", cp);
        else if ((cp >= 0xD800 && cp < 0xE000) || cp == 0x2028 || cp == 0x2029)
            buf_fmt(b, "\\u%04x", cp);
        else buf_add(b, s + i, (size_t)k);
        i += (size_t)k;
    }
    buf_add(b, &quote, 1);
}

/* ---- JSON strings ----------------------------------------------------------------------- */

/* A JSON string of valid UTF-8 text; ascii_only escapes the rest as Python's json.dumps
 * (lone surrogates, kept as their three bytes from a JSON answer, as \udXXX). */
static void json_str(Buf *b, const char *s, size_t n, int ascii_only) {
    buf_add(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        unsigned cp;
        int k = 1;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            buf_add(b, esc, 2);
        } else if (c == '\n') {
            buf_str(b, "\\n");
        } else if (c == '\r') {
            buf_str(b, "\\r");
        } else if (c == '\t') {
            buf_str(b, "\\t");
        } else if (c == '\b') {
            buf_str(b, "\\b");
        } else if (c == '\f') {
            buf_str(b, "\\f");
        } else if (c < 0x20 || (ascii_only && c == 0x7F)) {
            buf_fmt(b, "\\u%04x", c);
        } else if (c < 0x80 || !ascii_only) {
            buf_add(b, (const char *)&c, 1);
        } else {
            k = utf8_seq((const unsigned char *)s + i, n - i, &cp, 1);
            if (!k) {
                k = 1;
                cp = 0xFFFD;
            }
            if (cp >= 0x10000) {
                cp -= 0x10000;
                buf_fmt(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                buf_fmt(b, "\\u%04x", cp);
            }
        }
        i += (size_t)k;
    }
    buf_add(b, "\"", 1);
}

/* ---- a small JSON reader (the controller's answers, as Python's json.loads) ------------- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct Json {
    int type;
    char *str;  /* J_STR: the decoded text; J_NUM/J_BOOL: str() of the value */
    size_t len; /* of str */
    struct Json **items;
    char **keys; /* J_OBJ */
    size_t *klens;
    size_t count;
} Json;

typedef struct {
    const char *p, *end;
    int depth;
} Reader;

static void skip_ws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int hex4(Reader *r, unsigned *out) {
    if (r->end - r->p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = r->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    r->p += 4;
    *out = v;
    return 1;
}

/* UTF-8, and a lone surrogate as its three bytes (as Python keeps it in a str). */
static void put_utf8(Buf *b, unsigned cp) {
    char o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (char)(0xF0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    buf_add(b, o, n);
}

/* At the opening quote. */
static int json_string(Reader *r, char **out, size_t *len) {
    Buf b = {0};
    buf_grow(&b, 0);
    r->p++;
    while (r->p < r->end && *r->p != '"') {
        unsigned char c = (unsigned char)*r->p;
        if (c < 0x20) return 0;
        if (c != '\\') {
            buf_add(&b, r->p++, 1);
            continue;
        }
        if (++r->p >= r->end) return 0;
        char e = *r->p++;
        unsigned cp, lo;
        switch (e) {
        case '"': case '\\': case '/': buf_add(&b, &e, 1); break;
        case 'b': buf_add(&b, "\b", 1); break;
        case 'f': buf_add(&b, "\f", 1); break;
        case 'n': buf_add(&b, "\n", 1); break;
        case 'r': buf_add(&b, "\r", 1); break;
        case 't': buf_add(&b, "\t", 1); break;
        case 'u':
            if (!hex4(r, &cp)) return 0;
            if (cp >= 0xD800 && cp < 0xDC00 && r->end - r->p >= 6 && r->p[0] == '\\' &&
                r->p[1] == 'u') {
                r->p += 2;
                if (!hex4(r, &lo)) return 0;
                if (lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    r->p -= 6; /* not a pair: read it on its own */
            }
            put_utf8(&b, cp);
            break;
        default: return 0;
        }
    }
    if (r->p >= r->end) return 0;
    r->p++;
    *out = b.data;
    *len = b.len;
    return 1;
}

static Json *json_new(int type, const char *str, size_t len) {
    Json *j = checked(calloc(1, sizeof *j));
    j->type = type;
    if (str) {
        j->str = checked(malloc(len + 1));
        memcpy(j->str, str, len);
        j->str[len] = '\0';
        j->len = len;
    }
    return j;
}

static void json_push(Json *j, char *key, size_t klen, Json *item) {
    j->items = checked(realloc(j->items, (j->count + 1) * sizeof *j->items));
    j->keys = checked(realloc(j->keys, (j->count + 1) * sizeof *j->keys));
    j->klens = checked(realloc(j->klens, (j->count + 1) * sizeof *j->klens));
    j->items[j->count] = item;
    j->keys[j->count] = key;
    j->klens[j->count] = klen;
    j->count++;
}

static int starts(const Reader *r, const char *word) {
    size_t n = strlen(word);
    return (size_t)(r->end - r->p) >= n && !memcmp(r->p, word, n);
}

static int digit_at(const Reader *r, const char *p) { return p < r->end && *p >= '0' && *p <= '9'; }

/* A number (JSON's grammar: what Python's json reads) or a constant it knows. */
static Json *json_scalar(Reader *r) {
    static const char *const words[][2] = {{"null", "None"},     {"true", "True"},
                                           {"false", "False"},   {"NaN", "nan"},
                                           {"Infinity", "inf"},  {"-Infinity", "-inf"}};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        if (starts(r, words[i][0])) {
            r->p += strlen(words[i][0]);
            return json_new(i == 0 ? J_NULL : i < 3 ? J_BOOL : J_NUM, words[i][1],
                            strlen(words[i][1]));
        }
    }
    const char *start = r->p, *p = r->p;
    if (p < r->end && *p == '-') p++;
    if (!digit_at(r, p)) return NULL;
    if (*p++ != '0')
        while (digit_at(r, p)) p++;
    if (p < r->end && *p == '.' && digit_at(r, p + 1)) {
        p += 2;
        while (digit_at(r, p)) p++;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        if (q < r->end && (*q == '+' || *q == '-')) q++;
        if (digit_at(r, q)) {
            p = q;
            while (digit_at(r, p)) p++;
        }
    }
    r->p = p;
    return json_new(J_NUM, start, (size_t)(p - start));
}

static Json *json_value(Reader *r) {
    skip_ws(r);
    if (r->p >= r->end || ++r->depth > MAX_DEPTH) return NULL;
    Json *j = NULL;
    char c = *r->p;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        j = json_new(obj ? J_OBJ : J_ARR, NULL, 0);
        r->p++;
        skip_ws(r);
        if (r->p < r->end && *r->p == (obj ? '}' : ']')) {
            r->p++;
        } else {
            for (;;) {
                char *key = NULL;
                size_t klen = 0;
                skip_ws(r);
                if (obj) {
                    if (r->p >= r->end || *r->p != '"' || !json_string(r, &key, &klen)) return NULL;
                    skip_ws(r);
                    if (r->p >= r->end || *r->p++ != ':') return NULL;
                }
                Json *item = json_value(r);
                if (!item) return NULL;
                json_push(j, key, klen, item);
                skip_ws(r);
                if (r->p >= r->end) return NULL;
                char d = *r->p++;
                if (d == ',') continue;
                if (d == (obj ? '}' : ']')) break;
                return NULL;
            }
        }
    } else if (c == '"') {
        j = json_new(J_STR, NULL, 0);
        if (!json_string(r, &j->str, &j->len)) return NULL;
    } else {
        j = json_scalar(r);
    }
    r->depth--;
    return j;
}

/* json.loads(payload): UTF-8 (with "surrogatepass", after a BOM if any) holding one value. */
static Json *json_parse(const char *s, size_t n) {
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
        s += 3;
        n -= 3;
    }
    if (!utf8_valid(s, n, 1)) return NULL;
    Reader r = {s, s + n, 0};
    Json *j = json_value(&r);
    skip_ws(&r);
    return j && r.p == r.end ? j : NULL;
}

static Json *json_get(const Json *j, const char *key) {
    if (!j || j->type != J_OBJ) return NULL;
    Json *found = NULL; /* the last one, as Python's json */
    size_t n = strlen(key);
    for (size_t i = 0; i < j->count; i++)
        if (j->klens[i] == n && !memcmp(j->keys[i], key, n)) found = j->items[i];
    return found;
}

/* str(value) as Python prints it, for the values a controller sends (text, whole numbers;
 * a fraction is printed as it was written, where Python would print the float). */
static void json_text(Buf *b, const Json *j) {
    switch (j->type) {
    case J_NULL: buf_str(b, "None"); break;
    case J_STR:
    case J_BOOL:
    case J_NUM: buf_add(b, j->str, j->len); break;
    default: {
        int obj = j->type == J_OBJ;
        buf_str(b, obj ? "{" : "[");
        for (size_t i = 0; i < j->count; i++) {
            if (i) buf_str(b, ", ");
            if (obj) {
                str_repr(b, j->keys[i], j->klens[i]);
                buf_str(b, ": ");
            }
            if (j->items[i]->type == J_STR) str_repr(b, j->items[i]->str, j->items[i]->len);
            else json_text(b, j->items[i]);
        }
        buf_str(b, obj ? "}" : "]");
    }
    }
}

/* str(x) for each x in value (a list's items, a text's characters, a dict's keys). */
static size_t json_each(const Json *j, size_t i, Buf *out) {
    out->len = 0;
    buf_grow(out, 0);
    if (j->type == J_ARR && i < j->count) {
        json_text(out, j->items[i]);
        return i + 1;
    }
    if (j->type == J_OBJ && i < j->count) {
        buf_add(out, j->keys[i], j->klens[i]);
        return i + 1;
    }
    if (j->type == J_STR && i < j->len) {
        unsigned cp;
        int k = utf8_seq((const unsigned char *)j->str + i, j->len - i, &cp, 1);
        k = k ? k : 1;
        buf_add(out, j->str + i, (size_t)k);
        return i + (size_t)k;
    }
    return 0; /* done (Python fails on a number, true or null: printed as nothing) */
}

/* ---- Python's int() of bytes (a status, a length, a chunk size) ------------------------- */

/* int(s, base) for base 10 or 16: 1 and *value (its size counted up to BIG), 0 if Python
 * cannot read it either; *why then says what Python says. */
static int py_int(const char *s, size_t n, int base, long long *value, Buf *why) {
    const char *p = s, *end = s + n;
    int neg = 0, digits = 0, under = 0;
    long long v = 0;
    while (p < end && byte_space(*p)) p++;
    while (end > p && byte_space(end[-1])) end--;
    if (p < end && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (base == 16 && end - p >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        p += 2;
        under = 1; /* 0x_1f */
    }
    for (; p < end; p++) {
        int d = *p >= '0' && *p <= '9'                ? *p - '0'
                : base == 16 && *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                : base == 16 && *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                                       : -1;
        if (d < 0) {
            if (*p == '_' && under && p + 1 < end && p[1] != '_') {
                under = 0;
                continue;
            }
            break;
        }
        digits = under = 1;
        v = v > BIG / base ? BIG : v * base + d;
    }
    if (!digits || p != end) {
        why->len = 0;
        buf_fmt(why, "invalid literal for int() with base %d: ", base);
        bytes_repr(why, s, n);
        return 0;
    }
    *value = neg ? -v : v;
    return 1;
}

/* ---- the request ------------------------------------------------------------------------ */

typedef struct {
    const char *controller, *token, *ca;
    int as_json, parsable;
    char **rest;
    int *at; /* each rest word's place in argv */
    int nrest, last_own; /* where our last option was (0: none) */
} Args;

static int takes_value(const char *w);

/* Whether w is spelt as one of the options this front takes itself (--json, --parsable,
 * --controller[=V], --token[=V], --ca[=V]). */
static int spelt_as_ours(const char *w) {
    static const char *const names[] = {"--json", "--parsable", "--controller", "--token", "--ca"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        size_t len = strlen(names[k]);
        if (!strncmp(w, names[k], len) && (!w[len] || w[len] == '=')) return 1;
    }
    return 0;
}

/* Our options anywhere, as --x V or --x=V, and --json (fast._split); of sbatch, where an
 * option stands only: an option's value spelt as one of ours (-J --json names the job
 * "--json", as Slurm's getopt reads it: sbatch_words.command_words) is Python's. */
static void split_args(int argc, char **argv, Args *a) {
    static const char *const names[] = {"--controller", "--token", "--ca"};
    int sbatch = !strcmp(argv[1], "sbatch"), value_next = 0;
    memset(a, 0, sizeof *a);
    a->rest = checked(calloc((size_t)argc, sizeof *a->rest));
    a->at = checked(calloc((size_t)argc, sizeof *a->at));
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (value_next) { /* the value of the sbatch option before it */
            value_next = 0;
            if (spelt_as_ours(arg)) to_python();
            a->at[a->nrest] = i;
            a->rest[a->nrest++] = argv[i];
            continue;
        }
        if (!strcmp(arg, "--json")) {
            a->as_json = 1;
            a->last_own = i;
            continue;
        }
        if (!strcmp(arg, "--parsable")) { /* checked in main; sbatch's: where it stands tells */
            a->parsable = 1;
            if (strcmp(argv[1], "sbatch")) continue;
        }
        const char **slots[] = {&a->controller, &a->token, &a->ca};
        int own = 0;
        for (int k = 0; k < 3; k++) {
            size_t len = strlen(names[k]);
            if (strncmp(arg, names[k], len)) continue;
            if (arg[len] == '=') {
                *slots[k] = arg + len + 1;
            } else if (!arg[len]) {
                if (i + 1 >= argc) to_python(); /* --x needs a value */
                *slots[k] = argv[++i];
            } else {
                continue;
            }
            own = 1;
            a->last_own = i;
            break;
        }
        if (!own) {
            a->at[a->nrest] = i;
            a->rest[a->nrest++] = argv[i];
            value_next = sbatch && takes_value(arg);
        }
    }
}

/* The one plain http:// controller (fast.submit_files, client_base.split_urls), else Python's. */
static char *controller_url(const Args *a) {
    const char *urls = a->controller && *a->controller ? a->controller
                                                       : getenv("FUSESCHED_CONTROLLER");
    if (!urls) urls = DEFAULT_URL;
    for (const char *c = urls; *c; c++)
        if ((unsigned char)*c >= 0x80) to_python(); /* IDNA, latin-1 paths: as Python does */
    char *copy = checked(strdup(urls)), *save = NULL, *url = NULL;
    for (char *part = strtok_r(copy, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
        char *u = py_strip(part);
        size_t n = strlen(u);
        while (n && u[n - 1] == '/') u[--n] = '\0';
        if (!n || (url && !strcmp(url, u))) continue;
        if (url) to_python(); /* several controllers: fail-over */
        url = u;
    }
    if (!url || strncmp(url, "http://", 7)) to_python();
    return url;
}

/* A file's text (fast._read: UTF-8, universal newlines); 0 if it cannot be read. */
static int read_text(const char *path, Buf *out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    Buf raw = {0};
    if (!read_all(fd, &raw) || !utf8_valid(raw.data, raw.len, 0)) return 0;
    buf_grow(out, raw.len);
    for (size_t i = 0; i < raw.len; i++) {
        char c = raw.data[i];
        if (c == '\r') {
            c = '\n';
            if (i + 1 < raw.len && raw.data[i + 1] == '\n') i++;
        }
        out->data[out->len++] = c;
    }
    out->data[out->len] = '\0';
    free(raw.data);
    return 1;
}

/* Whether a script's #SBATCH lines may give --wait, -W or --parsable, which the Python
 * command honours (fast._asks_the_command); a false alarm costs only speed. */
static int asks_the_command(const char *text) {
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n >= 7 && !strncmp(line, "#SBATCH", 7) &&
            (memmem(line, n, "--wait", 6) || memmem(line, n, "--parsable", 10) ||
             memmem(line, n, "-W", 2)))
            return 1;
        line = end ? end + 1 : NULL;
    }
    return 0;
}

static void add_file(Buf *body, const char *name, const char *path) {
    Buf text = {0};
    if (!utf8_valid(name, strlen(name), 0) || !read_text(path, &text)) to_python();
    if (asks_the_command(text.data)) to_python();
    buf_str(body, "{\"name\": ");
    json_str(body, name, strlen(name), 0);
    buf_str(body, ", \"text\": ");
    json_str(body, text.data, text.len, 0);
    free(text.data);
}

/* Each file's "submit_dir": the folder the command runs in (fast.submit_dir), nothing when
 * it cannot be told; a name that is not UTF-8 text is Python's (which leaves it out). */
static void add_submit_dir(Buf *body) {
    static char *folder;
    static int known;
    if (!known) {
        known = 1;
        folder = getcwd(NULL, 0);
        if (folder && !utf8_valid(folder, strlen(folder), 0)) to_python();
    }
    if (!folder) return;
    buf_str(body, ", \"submit_dir\": ");
    json_str(body, folder, strlen(folder), 0);
}

/* Each file's "submit_host": this host's name (submit_host.this_host: gethostname, when it
 * is one SUBMIT_HOST_PATTERN takes: a letter or digit, then letters, digits, '.', '_', '-',
 * 255 at most), nothing otherwise. */
static void add_submit_host(Buf *body) {
    static char host[300];
    static int known, ok;
    if (!known) {
        known = 1;
        ok = !gethostname(host, sizeof host - 1) && isalnum((unsigned char)host[0]);
        host[sizeof host - 1] = '\0';
        size_t n = strlen(host);
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)host[i]) || strchr("._-", host[i]);
        ok = ok && n <= 255;
    }
    if (!ok) return;
    buf_str(body, ", \"submit_host\": ");
    json_str(body, host, strlen(host), 0);
}

/* ---- where sbatch's script is ----------------------------------------------------------- */

/* Slurm's sbatch options (submit/sbatch_words.py SLURM_OPTIONS and SLURM_SHORT; a test keeps
 * them equal): those that take a value (the next word, unless written --name=VALUE or -xVALUE)
 * and the others (none, or one written --name=VALUE only). */
static const char *const SBATCH_VALUES[] = {
    "account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir", "cluster",
    "cluster-constraint", "clusters", "comment", "constraint", "container", "core-spec",
    "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot",
    "dependency", "distribution", "error", "exclude", "export", "export-file",
    "extra-node-info", "gid", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node",
    "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint", "input", "job-name",
    "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label", "mem", "mem-bind",
    "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nodefile", "nodelist", "nodes",
    "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket",
    "tasks-per-node",
    "ntasks-per-tres", "open-mode", "output", "partition", "power", "prefer", "priority",
    "profile", "qos", "reservation", "segment", "signal", "sockets-per-node", "switches",
    "thread-spec", "threads-per-core", "time", "time-min", "tmp", "tres-per-task", "uid",
    "wait-all-nodes", "wckey", "wrap", NULL};
static const char *const SBATCH_OTHERS[] = {
    "contiguous", "exclusive", "get-user-env", "help", "hold", "ignore-pbs", "nice", "no-kill",
    "no-requeue", "overcommit", "oversubscribe", "parsable", "propagate", "quiet", "reboot",
    "requeue", "spread-job", "test-only", "usage", "use-min-nodes", "verbose", "version",
    "wait", NULL};
static const char SBATCH_SHORT_VALUES[] = "ABCDFGJLMNSabcdeimnopqtwx";
static const char SBATCH_SHORT_OTHERS[] = "HOQVWhksv";

static int listed(const char *const *names, const char *name) {
    for (; *names; names++)
        if (!strcmp(*names, name)) return 1;
    return 0;
}

/* Whether the sbatch option w takes the next word as its value (-J NAME, --job-name NAME);
 * what this cannot tell (flags run together, an unknown option) script_at hands to Python. */
static int takes_value(const char *w) {
    if (w[0] != '-' || !w[1]) return 0;
    if (w[1] == '-') return w[2] && !strchr(w, '=') && listed(SBATCH_VALUES, w + 2);
    return strchr(SBATCH_SHORT_VALUES, w[1]) && !w[2];
}

/* Where sbatch's script is among its words (fast.sbatch_words): the first that is neither an
 * option nor an option's value (':' separates a heterogeneous job's components); -1: none is
 * named. What this cannot tell as Python does (an unknown option, flags run together, "--")
 * is Python's; so is -V/--version before the script (sbatch_words.asks_version: it prints
 * the version and submits nothing). */
static int script_at(char **words, int n) {
    for (int i = 0; i < n; i++) {
        const char *w = words[i];
        if (!strcmp(w, ":")) continue;
        if (w[0] != '-' || !w[1]) return i;
        if (!strcmp(w, "--version") || !strcmp(w, "-V")) to_python();
        if (w[1] == '-') {
            if (!w[2]) to_python();
            if (strchr(w, '=') || listed(SBATCH_OTHERS, w + 2)) continue;
            if (!listed(SBATCH_VALUES, w + 2)) to_python();
            i++; /* its value */
            continue;
        }
        if (strchr(SBATCH_SHORT_VALUES, w[1])) {
            if (!w[2]) i++; /* -J NAME, else -JNAME */
            continue;
        }
        if (!strchr(SBATCH_SHORT_OTHERS, w[1]) || (w[2] && w[1] != 'k')) to_python();
    }
    return -1;
}

/* The "files" of the request (fast._files); Python's for any mistake in them. */
static void add_files(Buf *body, const Args *a, int sbatch) {
    buf_str(body, "\"files\": [");
    if (!sbatch) {
        if (!a->nrest) to_python();
        for (int i = 0; i < a->nrest; i++)
            if (a->rest[i][0] == '-') to_python();
        for (int i = 0; i < a->nrest; i++) {
            if (i) buf_str(body, ", ");
            add_file(body, a->rest[i], a->rest[i]);
            add_submit_dir(body);
            add_submit_host(body);
            buf_str(body, "}");
        }
    } else { /* sbatch [OPTIONS] SCRIPT */
        for (int i = 0; i < a->nrest; i++) /* --wrap=COMMAND, no script: Python's (fast.py) */
            if (!strcmp(a->rest[i], "--wrap") || !strncmp(a->rest[i], "--wrap=", 7)) to_python();
        /* none named (standard input's), the script's arguments (after it, --parsable and
         * our options too), or a script that is no regular file (a pipe, /dev/stdin,
         * none): Python's */
        int script = script_at(a->rest, a->nrest);
        struct stat st;
        if (script < 0 || script + 1 < a->nrest || a->last_own > a->at[script]) to_python();
        if (stat(a->rest[script], &st) || !S_ISREG(st.st_mode)) to_python();
        const char *path = a->rest[script], *slash = strrchr(path, '/');
        add_file(body, slash ? slash + 1 : path, path);
        buf_str(body, ", \"args\": [");
        for (int i = 0, first = 1; i < script; i++) {
            if (!strcmp(a->rest[i], "--parsable")) continue; /* the command's (a->parsable) */
            if (!utf8_valid(a->rest[i], strlen(a->rest[i]), 0)) to_python();
            if (!first) buf_str(body, ", ");
            first = 0;
            json_str(body, a->rest[i], strlen(a->rest[i]), 0);
        }
        buf_str(body, "]");
        add_submit_dir(body);
        add_submit_host(body);
        buf_str(body, "}");
    }
    buf_str(body, "]");
}

/* One variable of the environment: its name (n bytes), value, and place in environ. */
typedef struct {
    const char *name, *value;
    size_t n, at;
} EnvVar;

/* By name (bytes: the code point order of UTF-8 text), then by place in environ. */
static int env_order(const void *x, const void *y) {
    const EnvVar *a = x, *b = y;
    int c = memcmp(a->name, b->name, a->n < b->n ? a->n : b->n);
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

/* The request's "submit_env": this process's environment, which batch jobs inherit as with
 * Slurm's --export=ALL (submit_env.text_environ): sorted by name, the first of a name given
 * twice (as Python's os.environ), without empty names or what is not UTF-8 text. */
static void add_submit_env(Buf *body) {
    extern char **environ;
    size_t count = 0, kept = 0;
    while (environ[count]) count++;
    EnvVar *vars = checked(calloc(count + 1, sizeof *vars));
    for (size_t i = 0; i < count; i++) {
        const char *eq = strchr(environ[i], '=');
        if (!eq || eq == environ[i]) continue;
        size_t n = (size_t)(eq - environ[i]);
        if (!utf8_valid(environ[i], n, 0) || !utf8_valid(eq + 1, strlen(eq + 1), 0)) continue;
        vars[kept++] = (EnvVar){environ[i], eq + 1, n, i};
    }
    qsort(vars, kept, sizeof *vars, env_order);
    buf_str(body, ", \"submit_env\": {");
    for (size_t i = 0, first = 1; i < kept; i++) {
        if (i && vars[i].n == vars[i - 1].n && !memcmp(vars[i].name, vars[i - 1].name, vars[i].n))
            continue;
        if (!first) buf_str(body, ", ");
        first = 0;
        json_str(body, vars[i].name, vars[i].n, 0);
        buf_str(body, ": ");
        json_str(body, vars[i].value, strlen(vars[i].value), 0);
    }
    buf_str(body, "}");
    free(vars);
}

/* FUSESCHED_TOKEN, FUSESCHED_JOB_TOKEN, else the token file (client_base.default_token). */
static const char *default_token(void) {
    const char *names[] = {"FUSESCHED_TOKEN", "FUSESCHED_JOB_TOKEN"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return py_strip(checked(strdup(v)));
    }
    Buf path = {0};
    const char *xdg = getenv("XDG_CONFIG_HOME");
    if (xdg && *xdg) {
        buf_str(&path, xdg);
    } else { /* os.path.expanduser("~") */
        const char *home = getenv("HOME");
        struct passwd *pw;
        if (!home && (pw = getpwuid(getuid()))) home = pw->pw_dir;
        if (!home) home = "~";
        buf_str(&path, home);
        while (path.len && path.data[path.len - 1] == '/') path.data[--path.len] = '\0';
        buf_str(&path, "/.config");
    }
    buf_str(&path, "/fusesched/token");
    int fd = open(path.data, O_RDONLY | O_CLOEXEC);
    Buf text = {0};
    if (fd < 0 || !read_all(fd, &text) || !utf8_valid(text.data, text.len, 0)) return NULL;
    char *token = py_strip(text.data);
    return *token ? token : NULL;
}

/* getpass.getuser(): LOGNAME, USER, LNAME, USERNAME, else the password database. */
static const char *user_name(void) {
    const char *names[] = {"LOGNAME", "USER", "LNAME", "USERNAME"};
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return v;
    }
    struct passwd *pw = getpwuid(getuid());
    return pw ? pw->pw_name : NULL;
}

/* fast._host_port; 0 where Python says the URL is not a controller's. */
static int host_port(const char *where, char **host, char **port) {
    const char *colon;
    if (where[0] == '[') {
        const char *close = strchr(where, ']');
        if (!close) return 0;
        *host = checked(strndup(where + 1, (size_t)(close - where - 1)));
        *port = checked(strdup(close[1] == ':' ? close + 2 : close[1] ? "" : "80"));
    } else if ((colon = strrchr(where, ':'))) {
        *host = checked(strndup(where, (size_t)(colon - where)));
        *port = checked(strdup(colon + 1));
    } else {
        *host = checked(strdup(where));
        *port = checked(strdup("80"));
    }
    if (!**host || !**port) return 0;
    long value = 0;
    for (const char *c = *port; *c; c++) {
        if (*c < '0' || *c > '9') return 0;
        value = value * 10 + (*c - '0');
        if (value > 65535) return 0; /* Python: an OverflowError, its own to print */
    }
    return 1;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connection, each address in turn with TIMEOUT_S each (socket.create_connection); -1 if
 * none, with *timed_out if one attempt ran out of time, and *err the last attempt's error. */
static int connect_to(const char *host, const char *port, int *timed_out, int *err) {
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    *timed_out = *err = 0;
    if (getaddrinfo(host, port, &hints, &res)) return -1;
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            *err = errno;
            continue;
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        *err = rc ? errno : 0;
        if (rc && (errno == EINPROGRESS || errno == EINTR)) {
            long long deadline = now_ms() + TIMEOUT_S * 1000LL;
            struct pollfd p = {fd, POLLOUT, 0};
            int ready;
            do {
                long long left = deadline - now_ms();
                ready = poll(&p, 1, left > 0 ? (int)left : 0);
            } while (ready < 0 && errno == EINTR);
            socklen_t len = sizeof *err;
            if (ready == 0) {
                *err = ETIMEDOUT;
                *timed_out = 1;
            } else if (ready < 0) {
                *err = errno;
            } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len)) {
                *err = errno;
            }
            rc = *err ? -1 : 0;
        }
        if (!rc) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        struct timeval tv = {TIMEOUT_S, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    return fd;
}

/* ---- reading the answer (client_base._complete / _response) ----------------------------- */

typedef struct {
    long long status; /* counted up to BIG */
    Buf code;         /* the status as Python prints it */
    Buf body;
} Response;

static const char *find_nocase(const char *s, size_t n, const char *word) {
    size_t k = strlen(word);
    for (size_t i = 0; i + k <= n; i++)
        if (!strncasecmp(s + i, word, k)) return s + i;
    return NULL;
}

/* fast._complete's test: whether the head says where the answer ends (else: at the end of
 * the stream). */
static int says_its_end(const char *raw, size_t n) {
    const char *sep = memmem(raw, n, "\r\n\r\n", 4);
    if (!sep) return 0;
    size_t head = (size_t)(sep - raw);
    return find_nocase(raw, head, "\r\ncontent-length:") ||
           find_nocase(raw, head, "\r\ntransfer-encoding:");
}

/* fast._response: 1 with resp set, or 0 with why set (the ValueError Python would raise). */
static int parse_response(const char *raw, size_t n, Response *resp, Buf *why) {
    why->len = 0;
    buf_grow(why, 0);
    const char *sep = memmem(raw, n, "\r\n\r\n", 4);
    if (!sep) {
        buf_str(why, "not an HTTP response");
        return 0;
    }
    const char *line_end = memmem(raw, (size_t)(sep - raw), "\r\n", 2);
    if (!line_end) line_end = sep;
    /* the status line: lines[0].split(None, 2) */
    const char *version = raw;
    while (version < line_end && byte_space(*version)) version++;
    const char *code = version;
    while (code < line_end && !byte_space(*code)) code++;
    int http = code - version >= 5 && !memcmp(version, "HTTP/", 5);
    while (code < line_end && byte_space(*code)) code++;
    const char *code_end = code;
    while (code_end < line_end && !byte_space(*code_end)) code_end++;
    if (!http || code_end == code) {
        buf_str(why, "not an HTTP response");
        return 0;
    }
    /* the headers: the last of each name */
    const char *length = NULL, *length_end = NULL;
    int chunked = 0;
    for (const char *h = line_end; h < sep;) {
        h += 2;
        const char *end = memmem(h, (size_t)(sep - h), "\r\n", 2);
        if (!end) end = sep;
        const char *colon = memchr(h, ':', (size_t)(end - h));
        const char *name = h, *name_end = colon ? colon : end, *val = colon ? colon + 1 : end;
        const char *val_end = end;
        while (name < name_end && byte_space(*name)) name++;
        while (name_end > name && byte_space(name_end[-1])) name_end--;
        while (val < val_end && byte_space(*val)) val++;
        while (val_end > val && byte_space(val_end[-1])) val_end--;
        size_t nl = (size_t)(name_end - name), vl = (size_t)(val_end - val);
        if (nl == 17 && !strncasecmp(name, "transfer-encoding", 17)) {
            chunked = vl == 7 && !strncasecmp(val, "chunked", 7);
        } else if (nl == 14 && !strncasecmp(name, "content-length", 14)) {
            length = val;
            length_end = val_end;
        }
        h = end;
    }
    const char *b = sep + 4, *end = raw + n;
    Buf *body = &resp->body;
    body->len = 0;
    buf_grow(body, 0);
    long long size;
    if (chunked) { /* fast._unchunk */
        for (;;) {
            const char *eol = memmem(b, (size_t)(end - b), "\r\n", 2), *line = b;
            const char *line_stop = eol ? eol : end;
            const char *semi = memchr(line, ';', (size_t)(line_stop - line));
            b = eol ? eol + 2 : end;
            if (!py_int(line, (size_t)((semi ? semi : line_stop) - line), 16, &size, why))
                return 0;
            if (!size) break;
            if (size < 0) { /* Python would loop on it */
                buf_str(why, "a chunk size is negative");
                return 0;
            }
            if ((unsigned long long)(end - b) < (unsigned long long)size) {
                buf_str(why, "the answer ended early");
                return 0;
            }
            buf_add(body, b, (size_t)size);
            size_t rest = (size_t)(end - b) - (size_t)size;
            b += (size_t)size + (rest < 2 ? rest : 2);
        }
    } else if (length) {
        if (!py_int(length, (size_t)(length_end - length), 10, &size, why)) return 0;
        size_t have = (size_t)(end - b);
        if (size >= 0 && (unsigned long long)have < (unsigned long long)size) {
            buf_str(why, "the answer ended early");
            return 0;
        }
        if (size < 0) /* body[:-k] */
            size = (unsigned long long)-size >= have ? 0 : (long long)have + size;
        buf_add(body, b, (size_t)size);
    } else {
        buf_add(body, b, (size_t)(end - b));
    }
    if (!py_int(code, (size_t)(code_end - code), 10, &resp->status, why)) return 0;
    Buf *text = &resp->code; /* str(int(code)), for messages */
    text->len = 0;
    buf_str(text, resp->status < 0 ? "-" : "");
    size_t sign = text->len;
    for (const char *c = code; c < code_end; c++)
        if (*c >= '0' && *c <= '9' && (*c != '0' || text->len > sign)) buf_add(text, c, 1);
    if (text->len == sign) {
        text->len = 0;
        buf_str(text, "0");
    }
    return 1;
}

static int lost(const char *url, const char *why) {
    fprintf(stderr,
            "error: lost the controller at %s during the request (%s); it may or may not have "
            "been carried out\n",
            url, why);
    return 1;
}

/* str() of the OSError of the failed send or recv (a timeout: socket.timeout's). */
static const char *os_error(void) {
    static Buf text;
    int err = errno;
    text.len = 0;
    if (err == EAGAIN || err == EWOULDBLOCK) buf_str(&text, "timed out");
    else buf_fmt(&text, "[Errno %d] %s", err, strerror(err));
    return text.data;
}

/* One POST of req on fd (fast.post_once), its answer in resp; else an exit code (lost). */
static int exchange(int fd, const char *url, const Buf *req, Response *resp) {
    for (size_t sent = 0; sent < req->len;) {
        ssize_t n = send(fd, req->data + sent, req->len - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return lost(url, os_error());
        sent += (size_t)n;
    }
    Buf raw = {0}, why = {0};
    buf_grow(&raw, 0);
    int whole = 0;
    while (!whole) {
        char chunk[65536];
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return lost(url, os_error());
        if (n == 0) break;
        buf_add(&raw, chunk, (size_t)n);
        /* a server may keep the connection open: done when the head says where it ends */
        whole = says_its_end(raw.data, raw.len) && parse_response(raw.data, raw.len, resp, &why);
    }
    close(fd);
    if (whole || parse_response(raw.data, raw.len, resp, &why)) return 0;
    return lost(url, why.data);
}

/* ---- the answer ------------------------------------------------------------------------- */

/* client_base.refusal */
static void refusal(Buf *out, const char *payload, size_t n, const char *status) {
    Json *j = utf8_valid(payload, n, 0) ? json_parse(payload, n) : NULL;
    if (!j || j->type != J_OBJ) {
        buf_fmt(out, "HTTP %s: ", status);
        for (size_t i = 0, chars = 0; i < n && chars < 500; chars++) { /* 500 characters */
            unsigned cp;
            int k = utf8_seq((const unsigned char *)payload + i, n - i, &cp, 0);
            if (k) {
                buf_add(out, payload + i, (size_t)k);
                i += (size_t)k;
            } else {
                buf_str(out, "\xEF\xBF\xBD");
                i += utf8_bad((const unsigned char *)payload + i, n - i);
            }
        }
        return;
    }
    Json *detail = json_get(j, "detail");
    if (!detail) {
        buf_add(out, payload, n);
        return;
    }
    if (detail->type != J_ARR) {
        json_text(out, detail);
        return;
    }
    buf_str(out, "invalid request: "); /* pydantic's errors */
    Buf where = {0}, part = {0};
    for (size_t i = 0; i < detail->count; i++) {
        Json *item = detail->items[i], *loc = json_get(item, "loc"), *msg = json_get(item, "msg");
        if (i) buf_str(out, "; ");
        where.len = 0;
        buf_grow(&where, 0);
        int parts = 0;
        for (size_t k = 0; loc && (k = json_each(loc, k, &part));) {
            if (part.len == 4 && !memcmp(part.data, "body", 4)) continue;
            if (parts++) buf_str(&where, ".");
            buf_add(&where, part.data, part.len);
        }
        if (where.len) {
            buf_add(out, where.data, where.len);
            buf_str(out, ": ");
            json_text(out, msg ? msg : item);
        } else if (msg) {
            json_text(out, msg);
        } else {
            buf_str(out, "None");
        }
    }
}

static void json_dump(Buf *b, const Json *j) { /* json.dumps of str(x) */
    Buf text = {0};
    buf_grow(&text, 0);
    json_text(&text, j);
    json_str(b, text.data, text.len, 1);
}

/* What fast.run prints for an answer, and its exit code. */
static int report(const Response *resp, const char *url, int sbatch, int as_json,
                  int parsable) {
    const Buf *payload = &resp->body;
    if (resp->status >= 400) {
        Buf msg = {0};
        buf_str(&msg, "error: ");
        refusal(&msg, payload->data, payload->len, resp->code.data);
        buf_str(&msg, "\n");
        fwrite(msg.data, 1, msg.len, stderr);
        return resp->status < 500 ? 2 : 1;
    }
    Json *answer = json_parse(payload->data, payload->len);
    Json *ids = json_get(answer, "ids");
    if (!ids || ids->type != J_ARR || !ids->count) {
        fprintf(stderr, "error: %s did not answer as a fusesched controller\n", url);
        return 1;
    }
    Json *warnings = json_get(answer, "warnings");
    Buf line = {0};
    for (size_t i = 0; warnings && (i = json_each(warnings, i, &line));) {
        fputs("warning: ", stderr);
        fwrite(line.data, 1, line.len, stderr);
        fputs("\n", stderr);
    }
    Buf out = {0};
    buf_grow(&out, 0);
    if (parsable) { /* the ids alone, one a line (sbatch: its job's) */
        for (size_t i = 0; i < (sbatch ? 1 : ids->count); i++) {
            json_text(&out, ids->items[i]);
            buf_str(&out, "\n");
        }
    } else if (sbatch) {
        if (as_json) {
            buf_str(&out, "{\"id\": ");
            json_dump(&out, ids->items[0]);
            buf_str(&out, "}\n");
        } else {
            buf_str(&out, "Submitted batch job ");
            json_text(&out, ids->items[0]);
            buf_str(&out, "\n");
        }
    } else if (as_json) {
        if (ids->count == 1) {
            buf_str(&out, "{\"id\": ");
            json_dump(&out, ids->items[0]);
            buf_str(&out, ", \"ids\": [");
            json_dump(&out, ids->items[0]);
            buf_str(&out, "]}\n");
        } else {
            buf_str(&out, "{\"ids\": [");
            for (size_t i = 0; i < ids->count; i++) {
                if (i) buf_str(&out, ", ");
                json_dump(&out, ids->items[i]);
            }
            buf_str(&out, "]}\n");
        }
    } else {
        for (size_t i = 0; i < ids->count; i++) {
            buf_str(&out, "Submitted job ");
            json_text(&out, ids->items[i]);
            buf_str(&out, "\n");
        }
    }
    if (fwrite(out.data, 1, out.len, stdout) != out.len || fflush(stdout)) {
        /* as Python, whose buffered stdout fails to flush at its exit */
        fprintf(stderr, "error: cannot print the ids (%s); the submission was made\n",
                strerror(errno));
        return 120;
    }
    return 0;
}

/* ---- the command ------------------------------------------------------------------------ */

/* Whether --parsable is for the Python command to judge (fast.run): beside --json. (After
 * sbatch's script it is the script's argument: Python's, as every word there: add_files.) */
static int parsable_elsewhere(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--json")) return 1;
    return 0;
}

/* A closed standard descriptor reads as /dev/null (Python prints nothing to a closed one),
 * so that no file or socket of ours takes its place. */
static void standard_fds(void) {
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) != fd)
            to_python();
}

int main(int argc, char **argv) {
    g_argv = argv;
    const char *native = getenv("FUSESCHED_NATIVE");
    if (argc < 2 || (native && !strcmp(native, "0"))) to_python();
    int sbatch = !strcmp(argv[1], "sbatch");
    if (!sbatch && strcmp(argv[1], "submit")) to_python();
    for (int i = 2; i < argc; i++) /* anywhere, even as an option's value (cli.entry) */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ||
            !strcmp(argv[i], "--test-only") || /* submits nothing: the Python command asks */
            !strcmp(argv[i], "--wait") ||
            !strcmp(argv[i], "-W")) /* the Python command's own (cli/submission.py) */
            to_python();
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--parsable") && parsable_elsewhere(argc, argv))
            to_python(); /* fast.run: with --json */
    standard_fds();

    Args a;
    split_args(argc, argv, &a);
    const char *ca_env = getenv("FUSESCHED_CA");
    if ((a.ca && *a.ca) || (ca_env && *ca_env)) to_python();
    const char *url = controller_url(&a);

    Buf body = {0};
    buf_str(&body, "{");
    add_files(&body, &a, sbatch);
    add_submit_env(&body);
    const char *token = a.token && *a.token ? a.token : default_token();
    if (!token || !*token) { /* who is asking: a token, else the user's name */
        const char *user = user_name();
        if (!user) {
            fprintf(stderr,
                    "error: cannot tell who is submitting (uid %u has no user name): set USER "
                    "or use a token (FUSESCHED_TOKEN)\n",
                    (unsigned)getuid());
            return 1;
        }
        if (!utf8_valid(user, strlen(user), 0)) to_python();
        buf_str(&body, ", \"user\": ");
        json_str(&body, user, strlen(user), 0);
    }
    buf_str(&body, "}");

    /* fast.post_once */
    const char *rest_of_url = url + 7, *slash = strchr(rest_of_url, '/');
    char *where = checked(slash ? strndup(rest_of_url, (size_t)(slash - rest_of_url))
                                : strdup(rest_of_url));
    char *host, *port;
    if (!host_port(where, &host, &port)) to_python();
    for (const char *c = token ? token : ""; *c; c++) {
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7E) {
            fputs("error: the token has characters a token cannot have\n", stderr);
            return 1;
        }
    }
    int timed_out, err;
    int fd = connect_to(host, port, &timed_out, &err);
    if (fd < 0 && !timed_out) to_python(); /* nothing sent: the Python command says why */
    if (fd < 0) { /* Python would wait as long again to say so */
        fprintf(stderr, "error: cannot reach the controller at %s: ", url);
        if (err == ETIMEDOUT) fputs("timed out\n", stderr);
        else fprintf(stderr, "[Errno %d] %s\n", err, strerror(err));
        return 1;
    }
    Buf req = {0};
    buf_fmt(&req,
            "POST %s/v1/submissions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n",
            slash ? slash : "", where, body.len);
    if (token && *token) buf_fmt(&req, "Authorization: Bearer %s\r\n", token);
    buf_str(&req, "\r\n");
    buf_add(&req, body.data, body.len);

    /* from here on, never to_python(): the submission may have been made */
    signal(SIGPIPE, SIG_IGN);
    Response resp = {0};
    int rc = exchange(fd, url, &req, &resp);
    /* a controller older than "submit_dir", "submit_env" or "submit_host" refuses them,
     * having submitted nothing: the Python command sends the files again without them,
     * with its warning (fast.refused_fields) */
    if (!rc && resp.status == 422 && resp.body.len &&
        (memmem(resp.body.data, resp.body.len, "submit_dir", 10) ||
         memmem(resp.body.data, resp.body.len, "submit_env", 10) ||
         memmem(resp.body.data, resp.body.len, "submit_host", 11)))
        to_python();
    return rc ? rc : report(&resp, url, sbatch, a.as_json, a.parsable);
}
