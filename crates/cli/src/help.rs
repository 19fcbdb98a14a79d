//! The long help texts: what `convlog --help` prints after the command list,
//! and what `convlog help COMMAND` prints after the options, in the order of
//! the commands. clap prints them verbatim.

/// After the command list of `convlog --help`.
pub const EXAMPLES: &str = "Examples:
  convlog append ./my-store < events.jsonl   # record events (JSON lines), print their LSNs
  convlog dump ./my-store                    # every event as a JSON line, with its LSN
  convlog verify ./my-store                  # check every record and snapshot
  convlog resume ./my-store --conversation ctx_1   # what a crashed host left to do (JSON)
  convlog export ./my-store --conversation ctx_1 --format openai   # the rebuilt request body
  convlog import ./my-store snapshot.json    # a session snapshot (docs/interop.md) as a conversation
  convlog inspect ./my-store --conversation ctx_1   # a readable timeline of a conversation
  convlog tail ./my-store --follow           # events as a writer appends them
  convlog backup ./my-store ./my-backup      # a verified copy, beside a running writer
  convlog demo                               # crash a writer mid-run and recover

Exit codes: 0 success, 1 failure, 2 usage error. CONVLOG_LOG=info shows recovery notes.";

pub const APPEND_HELP: &str = r#"Input: one event per line in the JSON form of docs/events.md; a JSON array on one line is one
atomic batch (all of its events or none). Empty lines are skipped. Omitted fields get
defaults: entry.message_id a new UUID v4, created_at / at the current time, entry.sequence
the next one in that conversation and evaluation (counting up across lines). An "lsn"
field (as dump prints it) is ignored: the store assigns LSNs.

Output: the LSN of each appended event, one per line, flushed after each input line.

A line that does not parse or validate is reported on stderr with its line number and
field ("convlog: error: line 3: entry.role: unknown variant ...") and is not appended;
the lines before and after it are. convlog keeps going and exits 1 at the end if any
line was rejected. An I/O failure of the store stops it at once (exit 1). A line longer
than 64 MiB (INPUT_LINE_BYTES_MAX) is rejected without being read into memory. A UTF-8
byte order mark before the first line is skipped.

Example:
  echo '{"type":"conversation_recorded","conversation_id":"ctx_1","entry":{"evaluation_id":"eval-1","role":"user","content":"Weather in Paris?"}}' \
    | convlog append ./my-store
  convlog dump ./old-store | convlog append ./new-store --durability none"#;

pub const DUMP_HELP: &str = r#"Output: one line per event, its JSON form (docs/events.md) with an "lsn" field first:
  {"lsn":1,"type":"conversation_recorded","conversation_id":"ctx_1",...}

Read-only: takes no lock, so it works while a writer appends (it prints what was
written when it reaches the end). A damaged record before the writer's durable end, or
events that compaction deleted before dump reached them, stop it with exit 1 and the
located error on stderr, saying after which LSN the output stops.

Example:
  convlog dump ./my-store --conversation ctx_1 --from 100"#;

pub const VERIFY_HELP: &str = r#"Checks every record's checksum and that it decodes as an event, and every snapshot,
then prints a summary. Exits 1 naming the segment file and byte offset of the first
damage in the log, or the damaged snapshot. Takes no lock. --log-only checks only the
frames (checksums, LSN order), for a log written with the raw log API (`convlog demo`).

With --key KEYFILE it also checks a tamper-evident store: every frame's keyed tag, its
place and the digest chain; with --head CHECKPOINT (kept outside the store) that the log
reaches the checkpoint's LSN with the history signed there; with --public PUBFILE and
--head, the same with the public key only (no frame tags: the history up to the
checkpoint). Tampering exits 1 naming its kind (changed content, deleted events,
reordered, inserted, replayed, truncated, rolled back, ...) and the LSN, segment and
offset (docs/tamper.md).

Example:
  convlog verify ./my-store
  convlog verify ./my-store --key ~/keys/audit.key --head /audit/my-store.head"#;

pub const KEYGEN_HELP: &str = r#"Writes KEYFILE (mode 0600) and its public key file (KEYFILE.pub unless --public).
Keep the key outside every store: convlog refuses a key file group or others can read,
and one inside the store directory. --rotate OLD_KEYFILE writes a new file with the old
keys and a new one; the writer tags with the newest from its next open, and the first
frame it writes is tagged with the old key too, so the rotation is recorded in the log.

With --encryption it writes a store key instead: 32 random bytes as 64 hexadecimal
digits, mode 0600. A store opened with it (CONVLOG_KEY_FILE, or --key for erase) seals
each new conversation with a key of its own; without it the store does not open. Keep it
outside the store directory and back it up apart from the store.

Example:
  convlog keygen ~/keys/audit.key
  convlog keygen ~/keys/audit-2.key --rotate ~/keys/audit.key
  convlog keygen --encryption ~/keys/my-store.key
  CONVLOG_KEY_FILE=~/keys/my-store.key convlog append ./my-store < events.jsonl"#;

pub const SNAPSHOT_HELP: &str = r#"Prints the snapshot file, its LSN (every event below it is in the snapshot) and the
number of conversations in it. Needs the writer's lock (no other writer may run).

Example:
  convlog snapshot ./my-store"#;

pub const COMPACT_HELP: &str = r#"Without --delete-covered nothing is deleted (the whole log stays for audit). With it,
the sealed segments whose events all precede the newest snapshot are deleted; prints
each removed file, or why nothing was removed. Needs the writer's lock.

Example:
  convlog snapshot ./my-store && convlog compact ./my-store --delete-covered"#;

pub const BACKUP_HELP: &str = r#"Copies the store into DEST (a new or empty directory, outside the store) while its
writer keeps running: every segment up to an LSN that is made durable in the source
first, and the snapshots that check against exactly that log. The copy is written to
DEST.partial, verified, then renamed to DEST, so a DEST that exists is a whole backup.
Takes no lock.

Prints the backup's directory, its LSN range (every event below the end LSN is in it),
the segments and snapshots copied, and any snapshot left out with the reason.

Restore: stop the hosts of the store, move the damaged store aside, and back the
backup up again to where the store should live (or copy the directory); then open it.

Example:
  convlog backup ./my-store /backups/my-store-2026-11-23 && convlog verify /backups/my-store-2026-11-23"#;

pub const STATS_HELP: &str = r#"Prints segments (count and bytes), the LSN range, events, conversations, the LSN of the
snapshot in use, the in-memory index (entries and estimated bytes) and log bytes per
event. Opens the store read-only (its newest usable snapshot, then the log after it): takes no
lock and writes nothing, so it runs beside a writer in another process and sees what that
writer has appended so far.

Example:
  convlog stats ./my-store"#;

pub const ERASE_HELP: &str = r#"Destroys the conversation's key in the store's key table, after recording the erasure (who,
when, which conversation) as an event in the log. Its content can then never be read again,
by anyone, from the store or a copy of it made afterwards; reads and appends of it fail with
"was erased". Every other conversation, the log and its checksum chain stay as they were and
verify. Only a conversation of an encrypted store can be erased (docs/erasure.md). Prints a
JSON object: {"erased", "by", "at", "lsn"}.

Example:
  CONVLOG_KEY_FILE=~/keys/my-store.key convlog erase ./my-store --conversation ctx_123 --by "ticket 4711""#;

pub const RESUME_HELP: &str = r#"Output: one pretty JSON object, the library's resume state (`convlog::resume`):
  {
    "conversation_id": "trip",
    "evaluation_id": "eval-1",
    "finished": false,         // the last entry is an answer with no calls, nothing unfinished
    "next_sequence": 4,        // the sequence the next entry gets
    "turn": 1,                 // the turn of the last assistant response (0 before any)
    "next_turn": 2,
    "unfinished_calls": [      // no result, status pending or running: run these again
      {"call": {"call_id": "rome", "name": "lookup", "arguments": "...", "status": "running", ...},
       "assistant_message_id": "..."}
    ],
    "finished_calls": [        // completed or failed, or answered: never run these twice
      {"call": {"call_id": "paris", ...}, "result": {<the tool entry>} or null}
    ]
  }
--entries adds "entries": every entry of the evaluation, in sequence order.

--prompt NAMESPACE/KEY checks the prompt identity recorded on the evaluation's system
entry; "-" stands for an absent part (travel/- , -/-). A mismatch fails naming both
identities. An unknown conversation or evaluation fails too (exit 1).

Opens the store read-only (its newest usable snapshot, then the log after it): takes no
lock and writes nothing, so it runs beside a writer in another process and sees what that
writer has appended so far.

--continue carries the evaluation to its end instead, with the agent runner and the model
options of `convlog chat` (--provider and --model required): the calls whose `running`
status was recorded are run again (marked "(resumed)"), a call with a recorded result
never runs twice, and the model is called until a final answer, the step limit or calls
for tools it does not have. It takes the writer's lock and prints what `chat` prints.

Examples:
  convlog resume ./my-store --conversation ctx_123 --prompt travel/planner
  convlog resume ./my-store --conversation ctx_123 --continue \
    --provider openai-compatible --base-url http://127.0.0.1:11434/v1 --model llama3.2 \
    --tool-server "python3 ./tools.py""#;

pub const SERVE_HELP: &str = r#"Serves the message-control API (docs/server.md) on --listen: POST /chat, /chat/invoke,
/chat/add-ai-message, /context/add-messages, /context/set-messages, and /contexts to create,
read, list and publish contexts; GET /health and GET /openapi.json. Requests carry
`Authorization: Bearer TOKEN`; the configuration maps token hashes to users and names the
agents (upstream provider, model, base URL, MCP tools).

The server holds the store's writer lock: a second server (or `convlog append`) on the same
store fails at start with the lock error; the read-only commands (dump, inspect, tail,
verify, resume, export, stats, backup) keep working beside it. SIGTERM or SIGINT stops it:
no new connections, requests in flight finish, the store is synced and the lock released.

Examples:
  convlog serve ./store --config server.toml
  curl -s -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/contexts"#;

pub const CHAT_HELP: &str = r#"Runs one evaluation of the conversation with the agent runner (convlog-agent): records
the system entry (--system, --prompt) and the user MESSAGE, calls the model, runs the tools
it asks for, records each step the moment it happens, and stops at a final answer, the
step limit (--max-steps, default 32 model calls) or calls for tools it does not have (they
stay pending). A store is created if missing; the command takes the writer's lock.

Providers (--provider): openai, openai-responses, anthropic, gemini, ollama (native
/api/chat; OLLAMA_HOST is read), openai-compatible (any Chat Completions server; needs
--base-url, e.g. Ollama's http://127.0.0.1:11434/v1). Keys come from OPENAI_API_KEY,
ANTHROPIC_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY; ollama and openai-compatible need
none (send one with --header "Authorization: Bearer ...").

--tool-server CMD (repeatable) starts an MCP server over stdio and offers its tools; CMD
is split like a shell line ('single', "double" quotes, backslash escapes; no expansion).
--tool-timeout SECS bounds each call (default 120), --timeout SECS each model request.

Output: a line per recorded entry (user, assistant text and calls, tool results), then
"stop: ..." with the reason. --stream prints the answer text as it arrives. --json prints
the new entries as JSON lines (docs/events.md entry form) and then one stop line:
  {"stop":"final"|"step_limit"|"pending_calls","evaluation_id":...,"input_tokens":...}
A provider error (its body verbatim), a missing key (naming the variable), a store locked
by another writer: exit 1. A killed chat is carried on by `convlog resume --continue`.

Example (Ollama, no key):
  convlog chat ./my-store --conversation c1 --provider openai-compatible \
    --base-url http://127.0.0.1:11434/v1 --model llama3.2 --stream "Why is the sky blue?""#;

pub const EXPORT_HELP: &str = r#"Output, for a provider format: the request body fields as one pretty JSON object
(RenderedRequest::body()): merge in the model, tools and settings before sending.
  openai            {"messages": [...]}
  openai-responses  {"input": [...]}
  anthropic         {"system": ..., "messages": [...]}        (system only when there is one)
  gemini            {"system_instruction": ..., "contents": [...]}
  ollama            {"messages": [...]}
For jsonl: the conversation's neutral entries, one JSON object per line (the entry
form of docs/events.md; `convlog::model::ConversationEntry`).
For snapshot-json: one pretty JSON document in the session-snapshot shape of
docs/interop.md ({"version": "1", "created_at": ..., "slices": [{"slice_type": ...,
"item_type": ..., "items": [one item per message]}]}), with a "convlog" extension object
where convlog holds more than the documented fields (--documented-only leaves them out;
--type-name MODULE:TYPE names the slice and item type, default
convlog.interop:InnerMessage). `convlog import` reads it back.

Every evaluation of the conversation is exported, in conversation order.

Tool calls that never finished (no result, pending or running at a crash) are never
sent dangling: --pending drop (the default) leaves them out of their assistant message;
--pending error keeps them and answers each with an error result. A note on stderr
names the calls either way. --pending applies to the provider formats only.

--curate SPEC applies history managers, in the order written, before rendering:
  window=N    the system entries and the last N others (never splitting a tool batch)
  truncate=N  tool results cut to N characters
  budget=N    the newest entries that fit N estimated tokens (system entries always kept)
  prune=N     over N estimated tokens, old tool outputs replaced by a placeholder
Only the export is curated: the store keeps the full history and nothing is appended
(no history_curated event either).

Opens the store read-only (its newest usable snapshot, then the log after it): takes no
lock and writes nothing, so it runs beside a writer in another process and sees what that
writer has appended so far.

Example:
  convlog export ./my-store --conversation ctx_123 --format anthropic --pending error
  convlog export ./my-store --conversation ctx_123 --format openai --curate 'window=50,truncate=1000,budget=100000'"#;

pub const IMPORT_HELP: &str = r#"Input: a snapshot JSON document (docs/interop.md), as `convlog export --format
snapshot-json` writes it or as a host on the session model of that document does: the
one slice whose item_type ends in :InnerMessage (or --item-type) is read, one message per
item; other slices are ignored.

Every item becomes a conversation_recorded event, followed by the tool_status events
that give each call its recorded status, times and error; all of them are appended as
one atomic batch. Items without a message_id get a name-based UUID (v5), so importing
the same document again with --merge records nothing twice.

Into a conversation that already has events, import refuses (exit 1) unless told:
--merge adds the document's messages, --replace replaces them all (a messages_replaced
event opens the batch). Nothing is appended when anything fails: a bad document is
reported with the field at fault ("slices[0].items[3].tool_calls[0].status: ...") and
checked before the store is opened or created.

Output: the conversation, mode, entries and status events recorded, the evaluations,
the LSNs, and the unfinished calls of the latest evaluation (what `convlog resume`
reports).

Example:
  convlog export ./a --conversation trip --format snapshot-json > trip.json
  convlog import ./b trip.json --conversation trip-copy"#;

pub const INSPECT_HELP: &str = r#"Without --conversation: every conversation with its entry count, evaluations and
unfinished calls. With it: a timeline of evaluations, turns, messages (trimmed),
tool calls with status, duration and errors. Coloured on a terminal, plain when
piped; --json for scripts. Takes no lock: works while a writer runs. An
encrypted store read without its key (--key-file, CONVLOG_KEY_FILE) shows its
structure only: conversation ids, states, LSNs, sizes, key events, erasures.

Examples:
  convlog inspect ./my-store
  convlog inspect ./my-store --conversation ctx_123
  convlog inspect ./my-store --conversation ctx_123 --json | jq '.evaluations[].calls'"#;

pub const TAIL_HELP: &str = r#"Prints events as they are appended, by a writer in this or another process:
the last N events (-n, default 10), then, with --follow, every new one as it
arrives, until interrupted. One-line summaries, or the JSON lines of `dump`
with --json. Takes no lock.

Examples:
  convlog tail ./my-store --follow
  convlog tail ./my-store -n 0 --follow --json --conversation ctx_123"#;

pub const CREATE_CONTEXT_HELP: &str = r#"Creates a context: a conversation with an owner (--as USER) and a public/private flag.
A private context is usable only by its owner; a public one by anyone, --as or not.
Without --as the context has no owner and must be --public. The id may be a
conversation already recorded with `convlog append`: its entries become the context's.
Creates the store if it does not exist. Needs the writer's lock.

Output: the context as pretty JSON:
  {"context_id": "ctx_123", "owner": "alice", "public": false, "created_lsn": 1}

Fails (exit 1) with "Context with id: ID already exists" when it does.

Example:
  convlog create-context ./my-store --conversation ctx_123 --as alice"#;

pub const ADD_MESSAGES_HELP: &str = r#"Input (stdin): a message list, a JSON array (or a request body,
{"context_id": ..., "messages": [...]}):
  [{"sender": "human", "message": "Search for user data"},
   {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "database_search", "tool_input": {"table": "users"}},
   {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "Found 100 active users"},
   {"sender": "ai", "message": "There are 100 active users."}]
sender is human, ai or system. The messages continue the conversation's latest
evaluation, appended as one atomic batch.

Validation (message control's rules and wording; on any error nothing is appended, exit 1):
  Tool responses found without corresponding tool calls: ['call_123']
  Tool response with ID 'call_1' appears before its corresponding tool call
  Tool calls found without corresponding responses: ['call_2']
A response may answer a call already stored and still open.

The context must exist: create it with `convlog create-context` (add-messages never
creates one). Otherwise: "Context with id: ID does not exist"; a private context of
another user (or used without --as): "Context does not belong to user".

Output: the context after the change, as pretty JSON: its id, owner, public flag, the
LSNs appended, and every stored message in the message-list shapes:
  {"context_id": "ctx_123", "owner": "alice", "public": false, "lsns": [5, 6, 7, 8],
   "messages": [{"sender": "human", "message": "..."}, ...]}

Example:
  echo '[{"sender":"human","message":"Hello!"},{"sender":"ai","message":"Hi!"}]' \
    | convlog add-messages ./my-store --conversation ctx_123 --as alice"#;

pub const SET_MESSAGES_HELP: &str = r#"Input (stdin): a message list, as for `convlog add-messages`.

Replaces every message of the context with the list, atomically: one messages_replaced
event. The old messages stay in the log for audit (`convlog dump` shows them); the
conversation, its exports and resume see only the new ones, as one new evaluation.
Validated like add-messages, against an empty conversation; on any error nothing is
appended (exit 1). The context must exist (`convlog create-context`).

Output: as add-messages (one LSN: the messages_replaced event).

Example:
  echo '[{"sender":"system","message":"This is a fresh conversation"},{"sender":"human","message":"Hello, starting over"}]' \
    | convlog set-messages ./my-store --conversation ctx_123 --as alice"#;

pub const DEMO_HELP: &str = "Example:\n  convlog demo --dir /tmp/convlog-demo";
