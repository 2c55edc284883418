/* SPDX-License-Identifier: MIT */
/* prefix-run: run a Hugging Face checkpoint with prefixd's runtime from the shell. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prefixd.h"

#include "cache.h"
#include "cli.h"
#include "npy.h"
#include "prefix_run.h"
#include "prefixd_version.h"
#include "sample.h"
#include "session.h"
#include "run_text.h"

#define MODEL_HELP \
	"  --model DIR        the checkpoint's directory (config.json, model.safetensors)\n"
#define COMMON_HELP \
	"  --threads N        worker threads (default: all CPUs)\n" \
	"  --block-tokens B   KV block size in tokens, a power of two (default 64)\n" \
	"  --weights native|f32\n" \
	"                     hold f16/bf16 weight matrices as they are stored (native,\n" \
	"                     the default: half the memory, read at half the bytes) or\n" \
	"                     upcast to f32 at load; the results are the same\n" \
	"  --kv-dtype f32|f16|bf16\n" \
	"                     how the KV cache holds keys and values (default f32, the\n" \
	"                     faithful one; f16 halves the KV's memory and what prefixd\n" \
	"                     shares, within 5e-2 of the logits; see the README)\n" \
	"  --matmul f32|bf16  how prefill multiplies (default f32, the faithful one; bf16\n" \
	"                     rounds the activations to bf16 for the products with bf16\n" \
	"                     weights as stored, on AMX or AVX512-BF16 where the CPU has\n" \
	"                     them: several times faster, logits within 0.5; needs a bf16\n" \
	"                     checkpoint; info says which path runs)\n"
#define TEXT_HELP \
	"  --prompt TEXT      the prompt as text, encoded with the tokenizer in DIR\n" \
	"                     (tokenizer.json), with what its post-processor adds (BOS)\n" \
	"  --prompt-file FILE the prompt as the text of FILE (-: standard input),\n" \
	"                     exactly as read: a last newline is part of it\n" \
	"  --chat             a chat, rendered by the tokenizer's chat template\n" \
	"                     (tokenizer_config.json) with the generation prompt added:\n" \
	"  --system TEXT        its system message (optional)\n" \
	"  --user TEXT          its user message\n" \
	"  --messages FILE      or all its messages: a JSON list of {\"role\": ...,\n" \
	"                       \"content\": ...} (-: standard input)\n" \
	"  --chat-kwargs JSON   further template variables, a JSON object, as\n" \
	"                       apply_chat_template's **kwargs: '{\"enable_thinking\":\n" \
	"                       false}' (Qwen3), '{\"tools\": [...]}'\n" \
	"  --parse-special    match special-token text (\"<|im_start|>\") in the prompt or\n" \
	"                     the messages as special tokens, as Hugging Face does; by\n" \
	"                     default it is plain text, so a user cannot inject a turn\n"
#define IDS_HELP \
	"\n" \
	"IDS: token ids separated by commas and/or white space (\"1,2,3\"), or @FILE to\n" \
	"read them from a file, @- from standard input.\n"

static const char usage[] =
	"usage: prefix-run COMMAND [OPTIONS]\n"
	"       prefix-run COMMAND --help      that command's options in full\n"
	"\n"
	"commands:\n"
	"  generate  --model DIR (PROMPT | --tokens IDS) --max-new N [--ids] [--stop S]\n"
	"            [--ignore-eos] [--temperature T --top-k K --top-p P --seed S]\n"
	"                                         prints the new text as it is made (the\n"
	"                                         ids with --ids, or when DIR has no\n"
	"                                         tokenizer.json; greedy without\n"
	"                                         --temperature), stopping after the model's\n"
	"                                         end-of-sequence token unless --ignore-eos,\n"
	"                                         and before any --stop string\n"
	"  tokenize  --model DIR PROMPT [--no-special] [--pieces]\n"
	"                                         the prompt's ids, as --tokens takes them\n"
	"  detokenize --model DIR --tokens IDS [--skip-special]\n"
	"                                         the ids' text\n"
	"  info      --model DIR                  architecture, shapes, fingerprint, KV size\n"
	"  recache   --model DIR                  reads the checkpoint into the page cache\n"
	"                                         again, in 2 MiB pages where the kernel can\n"
	"                                         (decode reads them faster)\n"
	"  logits    --model DIR (PROMPT | --tokens IDS) --out FILE.npy [--split K]\n"
	"                                         float32 logits of every position, shape\n"
	"                                         (n_tokens, vocab); with --split the first K\n"
	"                                         tokens run, are frozen, and the rest is\n"
	"                                         appended in one call (the cached path)\n"
	"  demo      [--model DIR] [--prefix N] [--suffix N] [--suffixes N]\n"
	"                                         a shared frozen prefix and several suffixes,\n"
	"                                         timed against recomputing from scratch\n"
	"  warm      --model DIR (PROMPT | --tokens IDS) [--pin [--ttl SECS]]\n"
	"                                         computes a prefix (a system prompt) and\n"
	"                                         publishes it to prefixd ahead of time; --pin\n"
	"                                         keeps it from eviction, for SECS seconds\n"
	"                                         with --ttl\n"
	"  random-model --out DIR [--shape demo|smollm] [--dtype f32|f16|bf16] [--seed S]\n"
	"               [--force]\n"
	"                                         writes a random-weight Llama checkpoint\n"
	"                                         (config.json, model.safetensors): the demo's\n"
	"                                         small shape, or SmolLM-135M's; DIR must be\n"
	"                                         new or empty unless --force\n"
	"\n"
	"options of every command but random-model:\n"
	COMMON_HELP
	"\n"
	"sharing prompt prefixes through prefixd (generate, logits):\n"
	"  --socket PATH     the daemon's socket. generate uses the default socket\n"
	"                    ($PREFIXD_SOCKET, else $XDG_RUNTIME_DIR/prefixd.sock, else\n"
	"                    /run/prefixd.sock) when a\n"
	"                    daemon is running there; logits only with --socket, and then\n"
	"                    writes the rows of the positions it computed (stderr says which)\n"
	"  --salt TEXT       share only with processes that give the same salt\n"
	"  --shared          attach the daemon's shared namespace too (prefixd\n"
	"                    --shared-group): a prompt with nothing cached of this user's\n"
	"                    attaches the shared prefix, and what it computes is published\n"
	"                    there (by prefixd --shared-publishers only; others are told)\n"
	"  --no-wait         compute the prompt's missing blocks at once, even while\n"
	"                    another process computes them (by default it waits for\n"
	"                    that process's blocks: single flight)\n"
	"  --no-cache        compute everything here\n"
	"\n"
	"PROMPT: text, encoded with DIR's tokenizer.json (prefix-run generate --help):\n"
	"  --prompt TEXT | --prompt-file FILE | --chat --user TEXT [--system TEXT]\n"
	"  | --chat --messages FILE, with --chat-kwargs JSON for the template's further\n"
	"  variables, and --parse-special to match special-token text\n"
	"  in it (by default it is plain text: no prompt injection)\n"
	IDS_HELP;

static const char help_info[] =
	"usage: prefix-run info --model DIR [--socket PATH] [--block-tokens B]\n"
	"                       [--kv-dtype f32|f16|bf16] [--matmul f32|bf16] [--threads N]\n"
	"\n"
	"Prints the checkpoint's architecture, shapes, parameter count, fingerprint,\n"
	"KV bytes per token and per block, what prompts of 512, 2048 and 8192 tokens\n"
	"cost in prefixd (full blocks, charged in whole pages), and the kernels in\n"
	"use. With a daemon at --socket or the default socket, also its memory budget,\n"
	"quota per user and pin-max, and how many such prefixes each holds; the\n"
	"daemon must store blocks of --block-tokens B.\n"
	"\n"
	MODEL_HELP COMMON_HELP
	"  --socket PATH      the daemon to ask for its limits (default: the default\n"
	"                     socket, when a daemon runs there)\n";

static const char help_recache[] =
	"usage: prefix-run recache --model DIR [--threads N]\n"
	"\n"
	"Writes back and drops the page cache of the checkpoint's safetensors files,\n"
	"then loads the model once, which reads them in again: into 2 MiB pages where\n"
	"the kernel and file system can (transparent huge pages for files, ext4 and\n"
	"xfs large folios). A checkpoint written or copied a moment ago (a download,\n"
	"a conversion) sits in the small pages its writer made, and decode, which\n"
	"reads every weight each token, streams 2 MiB pages faster. Costs one read of\n"
	"the files; pages another process maps stay as they are. Prints how many of\n"
	"the weights' bytes are in 2 MiB pages afterwards (info prints it too).\n"
	"\n"
	MODEL_HELP
	"  --threads N        threads that hash the weights (default: all CPUs)\n";

static const char help_logits[] =
	"usage: prefix-run logits --model DIR (PROMPT | --tokens IDS) --out FILE.npy\n"
	"                         [--split K]\n"
	"                         [--socket PATH [--salt TEXT] [--shared]] [--threads N]\n"
	"                         [--block-tokens B]\n"
	"\n"
	"Writes the float32 logits of every position as a NumPy array of shape\n"
	"(n_tokens, vocab).\n"
	"\n"
	MODEL_HELP
	"  --tokens IDS       the prompt's token ids (below), or PROMPT:\n"
	TEXT_HELP
	"  --no-special       leave out what the post-processor adds to a --prompt\n"
	"  --out FILE.npy     where to write the logits\n"
	"  --split K          run the first K tokens, freeze them, and append the rest in\n"
	"                     one call (the cached path; the result is the same)\n"
	"  --socket PATH      prefill through the prefixd at PATH: cached leading blocks\n"
	"                     are attached, so the file holds only the rows of the\n"
	"                     positions computed here (stderr says which)\n"
	"  --salt TEXT        share only with processes that give the same salt\n"
	"  --shared           the daemon's shared namespace too (prefix-run --help)\n"
	"  --no-cache         compute everything here (what logits does without --socket)\n"
	COMMON_HELP IDS_HELP;

static const char help_generate[] =
	"usage: prefix-run generate --model DIR (PROMPT | --tokens IDS) --max-new N\n"
	"                           [--ids] [--stop STRING]... [--ignore-eos]\n"
	"                           [--temperature T [--top-k K] [--top-p P] [--seed S]]\n"
	"                           [--socket PATH] [--salt TEXT] [--shared] [--no-cache]\n"
	"                           [--threads N] [--block-tokens B]\n"
	"\n"
	"Prints the text of at most N new tokens as it is made (special tokens left\n"
	"out; a newline added on a terminal only), or with --ids, or when DIR has no\n"
	"tokenizer.json, their ids on one line; on stderr, the time to the first\n"
	"token and the rate after it. It stops after the model's end-of-sequence\n"
	"token (eos_token_id in generation_config.json, an id or a list, else in\n"
	"config.json, and the tokenizer's eos_token), unless --ignore-eos. The\n"
	"prompt and every new token but the last must fit the model's context\n"
	"(max_position_embeddings): a --max-new past it is refused up front. With a\n"
	"tokenizer, ids past its vocabulary (padding rows of the embedding) are never\n"
	"sampled.\n"
	"\n"
	"  prefix-run generate --model DIR --chat --user \"Why is the sky blue?\" --max-new 64\n"
	"\n"
	MODEL_HELP
	"  --tokens IDS       the prompt's token ids (below), or PROMPT:\n"
	TEXT_HELP
	"  --no-special       leave out what the post-processor adds to a --prompt\n"
	"  --max-new N        how many new tokens at most\n"
	"  --ids              print the new tokens' ids, not their text\n"
	"  --stop STRING      stop before STRING in the text (not printed; up to 16\n"
	"                     of them; text is held back while it could begin one)\n"
	"  --ignore-eos       do not stop at end-of-sequence tokens: make all N\n"
	"  --temperature T    sample at temperature T (default: greedy, the likeliest)\n"
	"  --top-k K          sample among the K likeliest tokens only (0: all)\n"
	"  --top-p P          sample among the likeliest tokens whose probabilities add\n"
	"                     up to P (1: all)\n"
	"  --seed S           the sampler's seed: the same seed gives the same tokens\n"
	"  --socket PATH      prefixd's socket (default: $PREFIXD_SOCKET, else\n"
	"                     $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock, when a\n"
	"                     daemon runs there)\n"
	"  --salt TEXT        share only with processes that give the same salt\n"
	"  --shared           the daemon's shared namespace too (prefix-run --help)\n"
	"  --no-cache         compute everything here, without prefixd\n"
	COMMON_HELP IDS_HELP;

static const char help_demo[] =
	"usage: prefix-run demo [--model DIR] [--prefix N] [--suffix N] [--suffixes N]\n"
	"                       [--threads N] [--block-tokens B]\n"
	"\n"
	"Runs a shared frozen prefix and several suffixes on it, timed against\n"
	"recomputing each from scratch. Without --model it writes a small random-weight\n"
	"Llama to a temporary directory first.\n"
	"\n"
	"When DIR has a tokenizer.json, in text: one system prompt (a library's help\n"
	"desk) is computed once and frozen, and each question is answered on it\n"
	"(greedy, up to --suffix tokens or the end of sequence) and again from\n"
	"scratch; it prints the answers, the times and whether both ways agree (exit 1\n"
	"if not). A model of random weights answers gibberish.\n"
	"\n"
	"  --model DIR        the checkpoint's directory (default: a random model)\n"
	"  --prefix N         prefix tokens (default 1024; text: the system prompt's)\n"
	"  --suffix N         tokens of each suffix (default 32; text: of each answer,\n"
	"                     at most)\n"
	"  --suffixes N       how many suffixes (default 4; text: questions, at most 8)\n"
	COMMON_HELP;

static const char help_warm[] =
	"usage: prefix-run warm --model DIR (PROMPT | --tokens IDS) [--pin [--ttl SECS]]\n"
	"                       [--socket PATH] [--salt TEXT] [--shared] [--threads N]\n"
	"                       [--block-tokens B]\n"
	"\n"
	"Computes a prefix (a system prompt, say) and publishes its full blocks to\n"
	"prefixd ahead of time, so the first request already attaches it. Exits 1 when\n"
	"no daemon can be used or it did not store every block.\n"
	"\n"
	MODEL_HELP
	"  --tokens IDS       the prefix's token ids (below), or PROMPT:\n"
	TEXT_HELP
	"  --no-special       leave out what the post-processor adds to a --prompt\n"
	"  --pin              keep the prefix from eviction: your own (within your quota\n"
	"                     and the daemon's --pin-max), or with --shared the shared one\n"
	"                     (its publishers and root only)\n"
	"  --ttl SECS         with --pin: for SECS seconds\n"
	"  --socket PATH      prefixd's socket (default: $PREFIXD_SOCKET, else\n"
	"                     $XDG_RUNTIME_DIR/prefixd.sock, else /run/prefixd.sock)\n"
	"  --salt TEXT        share only with processes that give the same salt\n"
	"  --shared           publish into the daemon's shared namespace (prefixd\n"
	"                     --shared-group), for its group's members to attach: for\n"
	"                     prefixd --shared-publishers and root only\n"
	COMMON_HELP IDS_HELP;

static const char help_tokenize[] =
	"usage: prefix-run tokenize --model DIR (--prompt TEXT | --prompt-file FILE |\n"
	"                           --chat (--user TEXT [--system TEXT] | --messages FILE)\n"
	"                           [--chat-kwargs JSON]) [--no-special] [--parse-special]\n"
	"                           [--pieces]\n"
	"\n"
	"Prints the token ids of a prompt or chat on one line, comma-separated (what\n"
	"--tokens takes), as the model's tokenizer encodes it. DIR needs only\n"
	"tokenizer.json (and tokenizer_config.json for --chat): no weights.\n"
	"\n"
	"  --model DIR        the folder holding tokenizer.json\n"
	TEXT_HELP
	"  --no-special       leave out what the tokenizer's post-processor adds (BOS,\n"
	"                     EOS) to a --prompt; a chat never gets them\n"
	"  --pieces           print the tokens' strings (JSON strings, space-separated)\n"
	"                     instead of their ids\n";

static const char help_detokenize[] =
	"usage: prefix-run detokenize --model DIR --tokens IDS [--skip-special]\n"
	"\n"
	"Prints the text of the token ids exactly, with no newline added. DIR needs\n"
	"only tokenizer.json: no weights.\n"
	"\n"
	"  --model DIR        the folder holding tokenizer.json\n"
	"  --tokens IDS       the ids (below)\n"
	"  --skip-special     leave out special tokens (what generate prints does)\n"
	IDS_HELP;

static const char help_random_model[] =
	"usage: prefix-run random-model --out DIR [--shape demo|smollm] [--dtype f32|f16|bf16]\n"
	"                               [--seed S] [--force]\n"
	"\n"
	"Writes a random-weight Llama checkpoint, config.json and model.safetensors, to\n"
	"DIR (created if need be), for benchmarks and demos.\n"
	"\n"
	"  --out DIR          a new or empty directory\n"
	"  --shape SHAPE      demo (small, the default) or smollm (SmolLM-135M's shape)\n"
	"  --dtype DTYPE      the weights' dtype: f32 (the default), f16 or bf16\n"
	"  --seed S           draw the weights from seed S (default: 42): another seed,\n"
	"                     another model fingerprint\n"
	"  --force            write into a directory that is not empty: config.json and\n"
	"                     model.safetensors are replaced, other files stay\n";

/* Each option is a bit of a 64-bit mask; getopt_long gets its index (an
 * int, below ':' and '?'). */
enum opt_index {
	I_MODEL,
	I_TOKENS,
	I_SPLIT,
	I_OUT,
	I_MAXNEW,
	I_TEMP,
	I_TOPK,
	I_TOPP,
	I_SEED,
	I_THREADS,
	I_BLOCK,
	I_PREFIX,
	I_SUFFIX,
	I_NSUFFIX,
	I_SOCKET,
	I_SALT,
	I_NOCACHE,
	I_SHAPE,
	I_PIN,
	I_TTL,
	I_IGNORE_EOS,
	I_FORCE,
	I_WEIGHTS,
	I_DTYPE,
	I_KV_DTYPE,
	I_SHARED,
	I_MATMUL,
	I_PROMPT,
	I_PROMPT_FILE,
	I_CHAT,
	I_SYSTEM,
	I_USER,
	I_MESSAGES,
	I_PARSE_SPECIAL,
	I_NO_SPECIAL,
	I_PIECES,
	I_IDS,
	I_STOP,
	I_SKIP_SPECIAL,
	I_CHAT_KWARGS,
	I_NO_WAIT,
	I_COUNT,
};
_Static_assert(I_COUNT < ':', "option indices must not collide with getopt's returns");
#define O_MODEL (UINT64_C(1) << I_MODEL)
#define O_TOKENS (UINT64_C(1) << I_TOKENS)
#define O_SPLIT (UINT64_C(1) << I_SPLIT)
#define O_OUT (UINT64_C(1) << I_OUT)
#define O_MAXNEW (UINT64_C(1) << I_MAXNEW)
#define O_TEMP (UINT64_C(1) << I_TEMP)
#define O_TOPK (UINT64_C(1) << I_TOPK)
#define O_TOPP (UINT64_C(1) << I_TOPP)
#define O_SEED (UINT64_C(1) << I_SEED)
#define O_THREADS (UINT64_C(1) << I_THREADS)
#define O_BLOCK (UINT64_C(1) << I_BLOCK)
#define O_PREFIX (UINT64_C(1) << I_PREFIX)
#define O_SUFFIX (UINT64_C(1) << I_SUFFIX)
#define O_NSUFFIX (UINT64_C(1) << I_NSUFFIX)
#define O_SOCKET (UINT64_C(1) << I_SOCKET)
#define O_SALT (UINT64_C(1) << I_SALT)
#define O_NOCACHE (UINT64_C(1) << I_NOCACHE)
#define O_SHAPE (UINT64_C(1) << I_SHAPE)
#define O_PIN (UINT64_C(1) << I_PIN)
#define O_TTL (UINT64_C(1) << I_TTL)
#define O_IGNORE_EOS (UINT64_C(1) << I_IGNORE_EOS)
#define O_FORCE (UINT64_C(1) << I_FORCE)
#define O_WEIGHTS (UINT64_C(1) << I_WEIGHTS)
#define O_DTYPE (UINT64_C(1) << I_DTYPE)
#define O_KV_DTYPE (UINT64_C(1) << I_KV_DTYPE)
#define O_SHARED (UINT64_C(1) << I_SHARED)
#define O_MATMUL (UINT64_C(1) << I_MATMUL)
#define O_PROMPT (UINT64_C(1) << I_PROMPT)
#define O_PROMPT_FILE (UINT64_C(1) << I_PROMPT_FILE)
#define O_CHAT (UINT64_C(1) << I_CHAT)
#define O_SYSTEM (UINT64_C(1) << I_SYSTEM)
#define O_USER (UINT64_C(1) << I_USER)
#define O_MESSAGES (UINT64_C(1) << I_MESSAGES)
#define O_PARSE_SPECIAL (UINT64_C(1) << I_PARSE_SPECIAL)
#define O_NO_SPECIAL (UINT64_C(1) << I_NO_SPECIAL)
#define O_PIECES (UINT64_C(1) << I_PIECES)
#define O_IDS (UINT64_C(1) << I_IDS)
#define O_STOP (UINT64_C(1) << I_STOP)
#define O_SKIP_SPECIAL (UINT64_C(1) << I_SKIP_SPECIAL)
#define O_CHAT_KWARGS (UINT64_C(1) << I_CHAT_KWARGS)
#define O_NO_WAIT (UINT64_C(1) << I_NO_WAIT)
#define O_LAST O_NO_WAIT
#define O_CACHE (O_SOCKET | O_SALT | O_NOCACHE | O_SHARED | O_NO_WAIT)
#define O_TEXT (O_PROMPT | O_PROMPT_FILE | O_CHAT | O_SYSTEM | O_USER | O_MESSAGES | O_CHAT_KWARGS | \
		O_PARSE_SPECIAL | O_NO_SPECIAL)
#define O_LOAD (O_THREADS | O_BLOCK | O_WEIGHTS | O_KV_DTYPE | O_MATMUL) /* every command that loads a model */

static const struct option longopts[] = {
	{ "model", required_argument, NULL, I_MODEL },
	{ "tokens", required_argument, NULL, I_TOKENS },
	{ "split", required_argument, NULL, I_SPLIT },
	{ "out", required_argument, NULL, I_OUT },
	{ "max-new", required_argument, NULL, I_MAXNEW },
	{ "temperature", required_argument, NULL, I_TEMP },
	{ "top-k", required_argument, NULL, I_TOPK },
	{ "top-p", required_argument, NULL, I_TOPP },
	{ "seed", required_argument, NULL, I_SEED },
	{ "threads", required_argument, NULL, I_THREADS },
	{ "block-tokens", required_argument, NULL, I_BLOCK },
	{ "prefix", required_argument, NULL, I_PREFIX },
	{ "suffix", required_argument, NULL, I_SUFFIX },
	{ "suffixes", required_argument, NULL, I_NSUFFIX },
	{ "socket", required_argument, NULL, I_SOCKET },
	{ "salt", required_argument, NULL, I_SALT },
	{ "no-cache", no_argument, NULL, I_NOCACHE },
	{ "shared", no_argument, NULL, I_SHARED },
	{ "shape", required_argument, NULL, I_SHAPE },
	{ "pin", no_argument, NULL, I_PIN },
	{ "ttl", required_argument, NULL, I_TTL },
	{ "ignore-eos", no_argument, NULL, I_IGNORE_EOS },
	{ "force", no_argument, NULL, I_FORCE },
	{ "weights", required_argument, NULL, I_WEIGHTS },
	{ "dtype", required_argument, NULL, I_DTYPE },
	{ "kv-dtype", required_argument, NULL, I_KV_DTYPE },
	{ "matmul", required_argument, NULL, I_MATMUL },
	{ "prompt", required_argument, NULL, I_PROMPT },
	{ "prompt-file", required_argument, NULL, I_PROMPT_FILE },
	{ "chat", no_argument, NULL, I_CHAT },
	{ "system", required_argument, NULL, I_SYSTEM },
	{ "user", required_argument, NULL, I_USER },
	{ "messages", required_argument, NULL, I_MESSAGES },
	{ "parse-special", no_argument, NULL, I_PARSE_SPECIAL },
	{ "no-special", no_argument, NULL, I_NO_SPECIAL },
	{ "pieces", no_argument, NULL, I_PIECES },
	{ "ids", no_argument, NULL, I_IDS },
	{ "stop", required_argument, NULL, I_STOP },
	{ "skip-special", no_argument, NULL, I_SKIP_SPECIAL },
	{ "chat-kwargs", required_argument, NULL, I_CHAT_KWARGS },
	{ "no-wait", no_argument, NULL, I_NO_WAIT },
	{ "help", no_argument, NULL, 'h' },
	{ 0 },
};

/* Flags that struct run_args (prefix_run.h) does not carry. */
static int ignore_eos; /* generate: go on past end-of-sequence tokens */
static int force_out;  /* random-model: write into a directory that is not empty */

static int run_random_model(struct run_args *a);

static const struct {
	const char *name;
	uint64_t allowed, required;
	int (*run)(struct run_args *a);
	const char *help;
} commands[] = {
	{ "info", O_MODEL | O_LOAD | O_SOCKET, O_MODEL, cmd_info, help_info },
	{ "recache", O_MODEL | O_THREADS, O_MODEL, cmd_recache, help_recache },
	{ "logits", O_MODEL | O_TOKENS | O_TEXT | O_SPLIT | O_OUT | O_LOAD | O_CACHE,
	  O_MODEL | O_OUT, cmd_logits, help_logits },
	{ "generate", O_MODEL | O_TOKENS | O_TEXT | O_MAXNEW | O_TEMP | O_TOPK | O_TOPP | O_SEED |
	  O_LOAD | O_CACHE | O_IGNORE_EOS | O_IDS | O_STOP, O_MODEL | O_MAXNEW, cmd_generate,
	  help_generate },
	{ "demo", O_MODEL | O_PREFIX | O_SUFFIX | O_NSUFFIX | O_LOAD, 0, cmd_demo, help_demo },
	{ "random-model", O_OUT | O_SHAPE | O_DTYPE | O_FORCE | O_SEED, O_OUT, run_random_model,
	  help_random_model },
	{ "warm", O_MODEL | O_TOKENS | O_TEXT | O_LOAD | O_SOCKET | O_SALT | O_SHARED | O_PIN |
	  O_TTL, O_MODEL, cmd_warm, help_warm },
	{ "tokenize", O_MODEL | O_TEXT | O_PIECES, O_MODEL, cmd_tokenize, help_tokenize },
	{ "detokenize", O_MODEL | O_TOKENS | O_SKIP_SPECIAL, O_MODEL | O_TOKENS, cmd_detokenize,
	  help_detokenize },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char *opt_name(uint64_t bit)
{
	for (const struct option *o = longopts; o->name; o++)
		if (o->val < I_COUNT && (UINT64_C(1) << o->val) == bit)
			return o->name;
	return "?";
}

int load_model(const struct run_args *a, struct pfx_model **m)
{
	struct pfx_model_opts o = { .threads = a->threads, .block_tokens = a->block_tokens,
				    .weights = a->weights, .kv_dtype = a->kv_dtype,
				    .matmul = a->matmul };
	struct pfx_error err = { "" };
	struct stat st;
	if (!stat(a->model, &st) && !S_ISDIR(st.st_mode)) {
		/* A file: most likely the checkpoint's config.json or weights. */
		char parent[PATH_MAX], hint[PATH_MAX + 32] = "";
		snprintf(parent, sizeof(parent), "%s", a->model);
		char *slash = strrchr(parent, '/');
		if (slash == parent)
			slash[1] = 0;
		else if (slash)
			*slash = 0;
		else
			snprintf(parent, sizeof(parent), ".");
		char cfg[PATH_MAX + 16];
		snprintf(cfg, sizeof(cfg), "%s/config.json", parent);
		if (!access(cfg, F_OK))
			snprintf(hint, sizeof(hint), ": --model %s", parent);
		fprintf(stderr, "prefix-run: cannot load model: %s is not a directory (give the checkpoint's directory, the one holding config.json and model.safetensors%s)\n",
			a->model, hint);
		return -1;
	}
	if (pfx_model_load(a->model, &o, m, &err)) {
		fprintf(stderr, "prefix-run: cannot load model: %s\n", err.msg);
		return -1;
	}
	if (a->tok && text_check_vocab(a->tok, pfx_model_config(*m)->vocab, a->model)) {
		pfx_model_free(*m);
		*m = NULL;
		return -1;
	}
	return 0;
}

/* Whether a prompt of n tokens, and max_new new tokens after it (0: none),
 * fit m's context. Every new token but the last takes a position: the last
 * is printed, never run. 0, or -1 after saying why. */
static int check_context(const struct run_args *a, const struct pfx_model *m, const char *cmd,
			 size_t n, long max_new)
{
	size_t P = (size_t)pfx_model_config(m)->max_positions;
	if (n > P) {
		fprintf(stderr, "prefix-run %s: the prompt's %zu tokens do not fit the model's context of %zu positions (max_position_embeddings in %s/config.json)\n",
			cmd, n, P, a->model);
		return -1;
	}
	if (max_new > 0 && n + (size_t)max_new - 1 > P) {
		fprintf(stderr, "prefix-run %s: a prompt of %zu tokens and --max-new %ld need %zu positions, more than the model's context of %zu (max_position_embeddings in %s/config.json); every new token but the last takes a position, so --max-new is at most %zu here\n",
			cmd, n, max_new, n + (size_t)max_new - 1, P, a->model, P - n + 1);
		return -1;
	}
	return 0;
}

/* The model's end-of-sequence token ids: the runtime's reading of the
 * folder (pfx_eos_read), and the tokenizer's eos_token. */
struct eos {
	size_t n;
	int32_t id[PFX_EOS_MAX];
	const char *from[PFX_EOS_MAX]; /* the file that named each */
};

/* 1 + the index of t in e, 0 when t is not an end-of-sequence id. */
static size_t is_eos(const struct eos *e, int32_t t)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->id[i] == t)
			return i + 1;
	return 0;
}

/* The end-of-sequence ids of a->model for a vocabulary of V: 0, or -1
 * after saying why. */
static int read_eos(const struct run_args *a, int V, struct eos *e)
{
	struct pfx_eos_ids ids;
	struct pfx_error err = { "" };
	if (pfx_eos_read(a->model, (size_t)V, &ids, &err)) {
		fprintf(stderr, "prefix-run: %s (fix it, or give --ignore-eos)\n", err.msg);
		return -1;
	}
	e->n = 0;
	for (size_t i = 0; i < ids.n; i++) {
		e->id[e->n] = ids.id[i];
		e->from[e->n++] = ids.from;
	}
	/* And the tokenizer's (pfx_tokenizer_eos: the same ids, else
	 * tokenizer_config.json's eos_token): a chat model's end of turn. */
	size_t ntok = 0;
	const int32_t *tok = a->tok ? pfx_tokenizer_eos(a->tok, &ntok) : NULL;
	for (size_t i = 0; i < ntok && e->n < PFX_EOS_MAX; i++)
		if (!is_eos(e, tok[i])) {
			e->id[e->n] = tok[i];
			e->from[e->n++] = "tokenizer_config.json";
		}
	return 0;
}

/* random-model writes into a new or empty directory unless --force: a
 * checkpoint written over another one would mix their files. Returns the
 * exit status. */
static int run_random_model(struct run_args *a)
{
	struct stat st;
	if (stat(a->out, &st)) {
		if (errno != ENOENT) {
			fprintf(stderr, "prefix-run random-model: cannot use --out %s: %s\n", a->out,
				strerror(errno));
			return 1;
		}
		return cmd_random_model(a);
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "prefix-run random-model: --out %s is a file, not a directory; give a new or empty directory\n",
			a->out);
		return 2;
	}
	DIR *d = opendir(a->out);
	if (!d) {
		fprintf(stderr, "prefix-run random-model: cannot read --out %s: %s\n", a->out,
			strerror(errno));
		return 1;
	}
	size_t entries = 0;
	char first[256] = "";
	for (struct dirent *de; (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!entries++)
			snprintf(first, sizeof(first), "%s", de->d_name);
	}
	closedir(d);
	if (entries && !force_out) {
		fprintf(stderr, "prefix-run random-model: --out %s is not empty (%zu entr%s, '%s'%s); give a new or empty directory, or --force to replace config.json and model.safetensors there\n",
			a->out, entries, entries == 1 ? "y" : "ies", first,
			entries > 1 ? " and more" : "");
		return 2;
	}
	return cmd_random_model(a);
}

int cmd_recache(struct run_args *a)
{
	struct pfx_error err;
	if (pfx_checkpoint_recache(a->model, &err)) {
		fprintf(stderr, "prefix-run recache: %s\n", err.msg);
		return 1;
	}
	struct pfx_model *m;
	if (load_model(a, &m)) /* reads every weight: the fingerprint */
		return 1;
	char b[32], t[32];
	printf("%s of the weights' %s in 2 MiB pages\n", cli_bytes(pfx_model_weight_huge_bytes(m), b),
	       cli_bytes(pfx_model_weight_bytes(m), t));
	pfx_model_free(m);
	return 0;
}

struct pfx_cache *open_cache(const struct run_args *a, struct pfx_model *m, int explicit_only)
{
	char def[PREFIXD_SOCKET_PATH_MAX];
	const char *path = a->socket;
	if (a->no_cache || (explicit_only && !path))
		return NULL;
	if (!path) {
		/* The default socket: use a daemon if one runs, say so once if not. */
		if (prefixd_default_socket(def, sizeof(def)) || access(def, F_OK)) {
			fprintf(stderr, "prefix-run: no prefixd running at %s; computing alone\n", def);
			return NULL;
		}
		path = def;
	}
	struct pfx_cache *c;
	struct pfx_error err = { "" };
	const char *salt = a->salt ? a->salt : "";
	unsigned flags = (a->shared ? PFX_CACHE_SHARED : 0) | (a->no_wait ? PFX_CACHE_NO_WAIT : 0);
	if (pfx_cache_open_flags(m, path, salt, strlen(salt), flags, &c, &err)) {
		fprintf(stderr, "prefix-run: not using prefixd: %s; computing alone\n", err.msg);
		return NULL;
	}
	return c;
}

void report_prefill(const struct pfx_prefill_info *info, const struct pfx_error *cache_err)
{
	size_t n = info->attached + info->computed;
	if (info->cache_rc) {
		fprintf(stderr, "prefix-run: prompt of %zu tokens computed alone, nothing attached or published: prefixd could not be used: %s\n",
			n, cache_err->msg);
		return;
	}
	/* One line, whatever happened: the counts are the daemon's. */
	char stop[sizeof(cache_err->msg) + 128] = "";
	if (info->unpublished) {
		int known = info->publish_rc == -ENOSPC || info->publish_rc == -EDQUOT ||
			    info->publish_rc == -EEXIST;
		snprintf(stop, sizeof(stop), "; then publishing %s: %u new block%s not published (%s)",
			 known ? "stopped" : "failed", info->unpublished,
			 info->unpublished == 1 ? "" : "s", cache_err->msg);
	}
	char disk[64] = "";
	if (info->from_disk)
		snprintf(disk, sizeof(disk), " (%u block%s read back from prefixd's disk)",
			 info->from_disk, info->from_disk == 1 ? "" : "s");
	fprintf(stderr, "prefix-run: prompt of %zu tokens: %zu attached from the cache%s, %zu computed; %u new block%s published, %u already there%s\n",
		n, info->attached, disk, info->computed, info->published,
		info->published == 1 ? "" : "s", info->deduplicated, stop);
	if (info->recomputed && !info->attached)
		fprintf(stderr, "prefix-run: the prompt is one block (%zu tokens), already cached, but its last token must be computed, so nothing is attached; prompts longer than a block attach all their full blocks\n",
			info->recomputed);
	else if (info->recomputed)
		fprintf(stderr, "prefix-run: the prompt ends on a block boundary: its last block (%zu tokens) is cached but computed again, since its last token must be computed; a prompt one token longer attaches all its full blocks\n",
			info->recomputed);
}

int cmd_warm(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	int rc = 1;
	size_t B = (size_t)pfx_model_block_tokens(m), full = a->ntokens / B * B;
	struct pfx_session *s = NULL;
	struct pfx_prefill_info info;
	struct pfx_error err = { "" }, cerr = { "" };
	if (check_context(a, m, "warm", a->ntokens, 0)) {
		pfx_model_free(m);
		return 2;
	}
	struct pfx_cache *cache = open_cache(a, m, 0);
	if (!cache) {
		fprintf(stderr, "prefix-run: warm needs prefixd (above): nothing was published\n");
		goto out;
	}
	if (!full) {
		fprintf(stderr, "prefix-run: %zu tokens are less than one %zu-token block: nothing to publish\n",
			a->ntokens, B);
		goto out;
	}
	if (full < a->ntokens)
		fprintf(stderr, "prefix-run: the last %zu tokens do not fill a block: only the first %zu are published\n",
			a->ntokens - full, full);
	if (pfx_session_new(m, &s, &err) ||
	    pfx_session_prefill(s, cache, a->tokens, a->ntokens, PFX_LOGITS_NONE, NULL, &info, &cerr,
				&err)) {
		fprintf(stderr, "prefix-run: %s\n", err.msg[0] ? err.msg : "out of memory");
		goto out;
	}
	report_prefill(&info, &cerr);
	if (info.cache_rc || info.publish_rc)
		goto out;
	if (a->pin) {
		uint64_t pinned;
		if (pfx_cache_pin(cache, a->tokens, full, a->ttl, &pinned, &cerr)) {
			fprintf(stderr, "prefix-run: cannot pin: %s\n", cerr.msg);
			goto out;
		}
		fprintf(stderr, "prefix-run: pinned %zu tokens%s (pins hold %.1f MiB)\n", full,
			a->ttl ? " until the TTL ends" : "", (double)pinned / (1 << 20));
	}
	rc = 0;
out:
	pfx_session_free(s);
	pfx_cache_close(cache);
	pfx_model_free(m);
	return rc;
}

int cmd_logits(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	int rc = 1, V = pfx_model_config(m)->vocab;
	size_t n = a->ntokens, split = a->split, rows = n;
	struct pfx_session *s = NULL;
	struct pfx_cache *cache = NULL;
	struct pfx_error err = { "" };
	if (check_context(a, m, "logits", n, 0)) {
		pfx_model_free(m);
		return 2;
	}
	float *logits = malloc(n * (size_t)V * sizeof(float));
	if (a->has_split && (split < 1 || split >= n)) {
		fprintf(stderr, "prefix-run: --split %zu must be between 1 and %zu (tokens - 1)\n",
			split, n - 1);
		goto out;
	}
	if (!logits || pfx_session_new(m, &s, &err))
		goto fail;
	if (a->has_split) {
		if (pfx_session_append(s, a->tokens, split, PFX_LOGITS_ALL, logits, &err) ||
		    pfx_session_freeze(s, &err) ||
		    pfx_session_append(s, a->tokens + split, n - split, PFX_LOGITS_ALL,
				       logits + split * V, &err))
			goto fail;
	} else if ((cache = open_cache(a, m, 1))) {
		struct pfx_prefill_info info;
		struct pfx_error cerr = { "" };
		if (pfx_session_prefill(s, cache, a->tokens, n, PFX_LOGITS_ALL, logits, &info, &cerr,
					&err))
			goto fail;
		report_prefill(&info, &cerr);
		fprintf(stderr, "prefix-run: %s holds the logits of positions %zu to %zu\n", a->out,
			info.attached, n - 1);
		rows = info.computed;
	} else if (pfx_session_append(s, a->tokens, n, PFX_LOGITS_ALL, logits, &err)) {
		goto fail;
	}
	if (npy_write_f32(a->out, logits, rows, (size_t)V, &err))
		goto fail;
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "prefix-run: %s\n", err.msg[0] ? err.msg : "out of memory");
out:
	pfx_session_free(s);
	pfx_cache_close(cache);
	free(logits);
	pfx_model_free(m);
	return rc;
}

int cmd_generate(struct run_args *a)
{
	struct pfx_model *m;
	if (load_model(a, &m))
		return 1;
	int rc = 1, V = pfx_model_config(m)->vocab;
	/* Up front, not after hundreds of tokens: what does not fit the
	 * context, and a generation_config.json that cannot be read. */
	struct eos eos = { 0 };
	if (check_context(a, m, "generate", a->ntokens, a->max_new)) {
		pfx_model_free(m);
		return 2;
	}
	if (!ignore_eos && read_eos(a, V, &eos)) {
		pfx_model_free(m);
		return 1;
	}
	struct text_out *text = NULL;
	if (!a->text.ids && text_out_new(a->tok, &a->text, &text)) {
		pfx_model_free(m);
		return 1;
	}
	struct pfx_session *s = NULL;
	struct pfx_sampler *smp = NULL;
	struct pfx_cache *cache = open_cache(a, m, 0);
	struct pfx_prefill_info info;
	struct pfx_error err = { "" }, cerr = { "" };
	float *logits = malloc((size_t)V * sizeof(float));
	struct pfx_sampler_opts so = { .temperature = (float)a->temperature, .top_k = (int)a->top_k,
				       .top_p = (float)a->top_p, .seed = a->seed };
	if (!logits || pfx_sampler_new(&so, V, &smp, &err) || pfx_session_new(m, &s, &err))
		goto fail;
	double t0 = cli_now();
	if (pfx_session_prefill(s, cache, a->tokens, a->ntokens, PFX_LOGITS_LAST, logits, &info,
				&cerr, &err))
		goto fail;
	double t1 = cli_now();
	if (cache)
		report_prefill(&info, &cerr);
	long made = 0;
	int32_t t = -1;
	int stopped = 0; /* by a --stop string */
	/* Rows of the embedding past the tokenizer's vocabulary are padding
	 * (Qwen2.5 has 271 of them): no text has them, so they are never
	 * sampled, with --ids too, so both print the same tokens. */
	size_t nv = a->tok ? pfx_tokenizer_vocab_size(a->tok) : (size_t)V;
	while (made < a->max_new) {
		for (size_t i = nv; i < (size_t)V; i++)
			logits[i] = -INFINITY;
		t = pfx_sample(smp, logits);
		made++;
		if (text) {
			stopped = text_out_push(text, t);
			if (stopped < 0)
				goto out;
			if (stopped)
				break;
		} else {
			printf("%s%d", made > 1 ? " " : "", t);
		}
		if (is_eos(&eos, t) || made == a->max_new)
			break;
		if (pfx_session_decode(s, t, logits, &err)) {
			printf("\n");
			goto fail;
		}
	}
	if (text && !stopped && (stopped = text_out_finish(text)) < 0)
		goto out;
	/* Text ends as it ends, so a pipe gets exactly the text; a terminal
	 * gets a newline, or stderr's lines would continue the answer's. */
	if (!text || isatty(STDOUT_FILENO))
		printf("\n");
	fflush(stdout);
	double t2 = cli_now();
	if (stopped)
		fprintf(stderr, "prefix-run: stopped at a --stop string after %ld new tokens\n", made);
	if (!stopped && is_eos(&eos, t) && made < a->max_new)
		fprintf(stderr, "prefix-run: stopped at the end-of-sequence token %d (eos_token_id in %s) after %ld of at most %ld new tokens; give --ignore-eos to go on to --max-new\n",
			t, eos.from[is_eos(&eos, t) - 1], made, a->max_new);
	/* The rate only when there is one: no "0 more tokens (0.0 tok/s)". */
	char more[96] = "";
	if (made > 1)
		snprintf(more, sizeof(more), "; %ld more token%s in %.1f ms (%.1f tok/s)", made - 1,
			 made == 2 ? "" : "s", (t2 - t1) * 1e3, (made - 1) / (t2 - t1));
	fprintf(stderr, "prefix-run: time to first token %.1f ms (prompt of %zu token%s)%s\n",
		(t1 - t0) * 1e3, a->ntokens, a->ntokens == 1 ? "" : "s", more);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "prefix-run: %s\n", err.msg[0] ? err.msg : "out of memory");
out:
	text_out_free(text);
	pfx_sampler_free(smp);
	pfx_session_free(s);
	pfx_cache_close(cache);
	free(logits);
	pfx_model_free(m);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		printf("prefix-run %s\n", PREFIXD_VERSION);
		return 0;
	}
	/* "help COMMAND" is "COMMAND --help". */
	int help = argc > 2 && !strcmp(argv[1], "help");
	const char *name = argc > 1 ? argv[1 + help] : NULL;
	if (argc < 2 || (!help && (!strcmp(name, "--help") || !strcmp(name, "-h") ||
				   !strcmp(name, "help")))) {
		FILE *out = argc < 2 ? stderr : stdout;
		char archs[256];
		fputs(usage, out);
		/* From the runtime, so the list is the one that loads. */
		fputs("\narchitectures (config.json's \"architectures\"; README lists checkpoints):\n ", out);
		int col = 1;
		pfx_architectures(archs, sizeof(archs));
		for (char *t = strtok(archs, ", "); t;
		     t = strtok(NULL, ", ")) {
			if (col + strlen(t) + 2 > 80) {
				fputs("\n ", out);
				col = 1;
			}
			col += fprintf(out, " %s", t);
		}
		fputs("\n", out);
		return argc < 2 ? 2 : 0;
	}
	int cmd = -1;
	char names[128] = "";
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (!strcmp(name, commands[i].name))
			cmd = (int)i;
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
			 i ? ", " : "", commands[i].name);
	}
	if (cmd < 0) {
		fprintf(stderr, "prefix-run: unknown command '%s' (%s; prefix-run --help says more)\n",
			name, names);
		return 2;
	}
	if (help) {
		fputs(commands[cmd].help, stdout);
		return 0;
	}
	struct run_args a = { .top_p = 1.0, .prefix = 1024, .suffix = 32, .nsuffixes = 4 };
	uint64_t seen = 0;
	int c;
	long v;
	const char *tokens = NULL;
	opterr = 0;
	/* COMMAND --help prints that command's help, whatever else the line
	 * holds (a first pass that only looks for it). */
	while ((c = getopt_long(argc - 1, argv + 1, "h", longopts, NULL)) != -1)
		if (c == 'h') {
			fputs(commands[cmd].help, stdout);
			return 0;
		}
	optind = 0; /* getopt starts over */
	while ((c = getopt_long(argc - 1, argv + 1, "h", longopts, NULL)) != -1) {
		if (c == '?' || c == ':') {
			fprintf(stderr, "prefix-run: unknown option or missing value: %s (prefix-run %s --help lists its options)\n",
				argv[optind], commands[cmd].name);
			return 2;
		}
		uint64_t o = UINT64_C(1) << c;
		if (!(commands[cmd].allowed & o)) {
			fprintf(stderr, "prefix-run: --%s is not an option of '%s' (prefix-run %s --help lists its options)\n",
				opt_name(o), commands[cmd].name, commands[cmd].name);
			return 2;
		}
		if ((seen & o) && o != O_STOP) {
			fprintf(stderr, "prefix-run: --%s is given twice\n", opt_name(o));
			return 2;
		}
		seen |= o;
		char flag[32];
		snprintf(flag, sizeof(flag), "--%s", opt_name(o));
		int bad = 0;
		switch (o) {
		case O_MODEL: a.model = optarg; break;
		case O_TOKENS: tokens = optarg; break;
		case O_OUT: a.out = optarg; break;
		case O_SPLIT: bad = cli_long(flag, optarg, 1, 1 << 30, &v); a.split = (size_t)v; a.has_split = 1; break;
		case O_MAXNEW: bad = cli_long(flag, optarg, 1, 1 << 20, &a.max_new); break;
		case O_TEMP: bad = cli_float(flag, optarg, 0, 1e6, &a.temperature); break;
		case O_TOPK: bad = cli_long(flag, optarg, 0, 1 << 24, &a.top_k); break;
		case O_TOPP: bad = cli_float(flag, optarg, 1e-9, 1, &a.top_p); break;
		case O_SEED: bad = cli_long(flag, optarg, 0, __LONG_MAX__, &v); a.seed = (uint64_t)v; break;
		case O_THREADS: bad = cli_long(flag, optarg, 1, 1024, &v); a.threads = (int)v; break;
		case O_BLOCK:
			bad = cli_long(flag, optarg, 1, PFX_MAX_BLOCK_TOKENS, &v);
			if (!bad && (v & (v - 1))) {
				fprintf(stderr, "prefix-run: --block-tokens must be a power of two, not %ld\n", v);
				bad = -1;
			}
			a.block_tokens = (int)v;
			break;
		case O_PREFIX: bad = cli_long(flag, optarg, 1, 1 << 20, &v); a.prefix = (int)v; break;
		case O_SUFFIX: bad = cli_long(flag, optarg, 1, 1 << 20, &v); a.suffix = (int)v; break;
		case O_NSUFFIX: bad = cli_long(flag, optarg, 1, 1024, &v); a.nsuffixes = (int)v; break;
		case O_SOCKET: a.socket = optarg; break;
		case O_SALT: a.salt = optarg; break;
		case O_NOCACHE: a.no_cache = 1; break;
		case O_SHARED: a.shared = 1; break;
		case O_NO_WAIT: a.no_wait = 1; break;
		case O_SHAPE: a.shape = optarg; break;
		case O_PIN: a.pin = 1; break;
		case O_TTL: bad = cli_long(flag, optarg, 1, UINT32_MAX, &v); a.ttl = (uint32_t)v; break;
		case O_IGNORE_EOS: ignore_eos = 1; break;
		case O_FORCE: force_out = 1; break;
		case O_PROMPT: a.text.prompt = optarg; break;
		case O_PROMPT_FILE: a.text.prompt_file = optarg; break;
		case O_CHAT: a.text.chat = 1; break;
		case O_SYSTEM: a.text.system = optarg; break;
		case O_USER: a.text.user = optarg; break;
		case O_MESSAGES: a.text.messages = optarg; break;
		case O_CHAT_KWARGS: a.text.chat_kwargs = optarg; break;
		case O_PARSE_SPECIAL: a.text.parse_special = 1; break;
		case O_NO_SPECIAL: a.text.no_special = 1; break;
		case O_PIECES: a.text.pieces = 1; break;
		case O_IDS: a.text.ids = 1; break;
		case O_SKIP_SPECIAL: a.text.skip_special = 1; break;
		case O_STOP:
			if (a.text.nstop == TEXT_MAX_STOPS || !optarg[0]) {
				fprintf(stderr, "prefix-run: --stop takes a non-empty string, at most %d times\n",
					TEXT_MAX_STOPS);
				bad = -1;
			} else {
				a.text.stop[a.text.nstop++] = optarg;
			}
			break;
		case O_WEIGHTS:
			if (!strcmp(optarg, "native") || !strcmp(optarg, "f32")) {
				a.weights = optarg[0] == 'f' ? PFX_WEIGHTS_F32 : PFX_WEIGHTS_NATIVE;
			} else {
				fprintf(stderr, "prefix-run: --weights is native or f32, not '%s'\n", optarg);
				bad = -1;
			}
			break;
		case O_KV_DTYPE:
			if (pfx_kv_dtype_parse(optarg, &a.kv_dtype)) {
				fprintf(stderr, "prefix-run: --kv-dtype is f32, f16 or bf16, not '%s'\n", optarg);
				bad = -1;
			}
			break;
		case O_MATMUL:
			if (!strcmp(optarg, "f32") || !strcmp(optarg, "bf16")) {
				a.matmul = optarg[0] == 'b' ? PFX_MATMUL_BF16 : PFX_MATMUL_F32;
			} else {
				fprintf(stderr, "prefix-run: --matmul is f32 or bf16, not '%s'\n", optarg);
				bad = -1;
			}
			break;
		case O_DTYPE:
			if (!strcmp(optarg, "f32") || !strcmp(optarg, "f16") || !strcmp(optarg, "bf16")) {
				a.dtype = optarg;
			} else {
				fprintf(stderr, "prefix-run: --dtype is f32, f16 or bf16, not '%s'\n", optarg);
				bad = -1;
			}
			break;
		}
		if (bad)
			return 2;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "prefix-run: unexpected argument '%s'\n", argv[optind + 1]);
		return 2;
	}
	uint64_t missing = commands[cmd].required & ~seen;
	if (missing) {
		for (uint64_t bit = 1; bit <= O_LAST; bit <<= 1)
			if (missing & bit)
				fprintf(stderr, "prefix-run %s: --%s is required\n", commands[cmd].name,
					opt_name(bit));
		return 2;
	}
	if ((seen & O_NOCACHE) && (seen & (O_SOCKET | O_SALT | O_SHARED | O_NO_WAIT))) {
		fprintf(stderr, "prefix-run: --no-cache excludes --socket, --salt, --shared and --no-wait\n");
		return 2;
	}
	if (a.salt && strlen(a.salt) > PREFIXD_MAX_SALT) {
		fprintf(stderr, "prefix-run: --salt is at most %d bytes\n", PREFIXD_MAX_SALT);
		return 2;
	}
	if (cmd == 1 && a.has_split && (seen & O_SOCKET)) {
		fprintf(stderr, "prefix-run: logits --split runs the in-process cached path; it excludes --socket\n");
		return 2;
	}
	if ((seen & O_TTL) && !(seen & O_PIN)) {
		fprintf(stderr, "prefix-run: --ttl needs --pin\n");
		return 2;
	}
	bool random_model = commands[cmd].run == run_random_model;
	if (random_model && !(seen & O_SEED))
		a.seed = 42; /* the weights every demo model had before --seed */
	if ((seen & (O_TOPK | O_TOPP | (random_model ? 0 : O_SEED))) && !(seen & O_TEMP)) {
		fprintf(stderr, "prefix-run: --top-k, --top-p and --seed need --temperature\n");
		return 2;
	}
	if ((seen & O_STOP) && (seen & O_IDS)) {
		fprintf(stderr, "prefix-run: --stop works on the text: it excludes --ids\n");
		return 2;
	}
	/* A prompt is ids or text: exactly one source where one is needed. */
	if ((commands[cmd].allowed & O_PROMPT) &&
	    text_check_usage(&a.text, tokens != NULL, commands[cmd].name))
		return 2;
	if ((commands[cmd].allowed & O_PROMPT) && !tokens && !text_has_input(&a.text)) {
		fprintf(stderr, "prefix-run %s: give the prompt: %s--prompt TEXT, --prompt-file FILE or --chat --user TEXT\n",
			commands[cmd].name, commands[cmd].allowed & O_TOKENS ? "--tokens IDS, " : "");
		return 2;
	}
	if (tokens && cli_tokens(tokens, &a.tokens, &a.ntokens))
		return 2;
	/* The tokenizer: for text in, and for generate's text out (a folder
	 * without one prints ids, as before there was text); generate loads
	 * it with --ids too, so that both sample the same tokens. */
	int text_out = commands[cmd].run == cmd_generate;
	int need_tok = text_has_input(&a.text) || commands[cmd].run == cmd_detokenize;
	if ((need_tok || text_out) && text_load(a.model, need_tok, &a.tok)) {
		free(a.tokens);
		return 1;
	}
	if (!a.tok)
		a.text.ids = 1;
	if (a.text.nstop && !a.tok) {
		fprintf(stderr, "prefix-run: --stop needs the text, but %s has no tokenizer.json\n",
			a.model);
		free(a.tokens);
		return 2;
	}
	int rc = 0;
	if (text_has_input(&a.text) && commands[cmd].run != cmd_tokenize &&
	    text_encode(a.tok, &a.text, &a.tokens, &a.ntokens))
		rc = 1;
	if (!rc)
		rc = commands[cmd].run(&a);
	free(a.tokens);
	pfx_tokenizer_free(a.tok);
	return rc;
}
