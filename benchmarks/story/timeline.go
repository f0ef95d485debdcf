package story

import "time"

// Kind is what happened in one Event.
type Kind string

// The kinds of events a story records. A lane of the report is one
// client; the kinds below are what it draws on it.
const (
	// Acquire: the client asked for the lock (it waits until Grant).
	Acquire Kind = "acquire"
	// Grant: the lock was granted; Token is its fencing token, or 0 when
	// the mode has none.
	Grant Kind = "grant"
	// Renew: the holder extended its lease (a watchdog's renewal).
	Renew Kind = "renew"
	// Expire: the client's lease ended without a release (its TTL ran
	// out, its session expired, a node's key was expired early). Detail
	// says how it was observed.
	Expire Kind = "expire"
	// Pause: the client's process was stopped (SIGSTOP).
	Pause Kind = "pause"
	// Resume: the client's process was continued (SIGCONT).
	Resume Kind = "resume"
	// Fault: a fault other than a pause was injected into this client's
	// path (a partition cut or healed, a clock jump); Detail says which.
	Fault Kind = "fault"
	// Read: the client read the data; Value is what it read.
	Read Kind = "read"
	// WriteAccepted: a write of Value was applied. Stale marks a write
	// made by a client that no longer held the lock (or, in occ mode,
	// wrote from a value that was no longer current).
	WriteAccepted Kind = "write-accepted"
	// WriteRejected: a write of Value was refused by the store (a stale
	// fencing token, a version conflict). Stale as for WriteAccepted.
	WriteRejected Kind = "write-rejected"
	// Release: the client released the lock (Detail says when a release
	// found the lock no longer held).
	Release Kind = "release"
	// Note: anything else worth a mark on the lane.
	Note Kind = "note"
)

// Event is one mark on a client's lane.
type Event struct {
	// At is the time since the story started.
	At time.Duration `json:"at_ns"`
	// Client names the lane ("A", "B", ...).
	Client string `json:"client"`
	// Kind is what happened.
	Kind Kind `json:"kind"`
	// Token is the fencing token of a Grant, or of a write made under it
	// (0: none).
	Token uint64 `json:"token,omitempty"`
	// Value is the value read or written, when there is one.
	Value *int64 `json:"value,omitempty"`
	// Stale marks a write by a client that had lost the lock (or wrote
	// from a stale read).
	Stale bool `json:"stale,omitempty"`
	// Detail is a short human-readable explanation.
	Detail string `json:"detail,omitempty"`
}

// Outcome is what a story's run found, checked against the data at the
// end, not taken from the clients' word.
type Outcome struct {
	// Expected is the final value if every client's update applied once.
	Expected int64 `json:"expected"`
	// Final is the value read from the store at the end.
	Final int64 `json:"final"`
	// LostUpdates is how many acknowledged updates the final value is
	// missing: for the stories' stock, which every sale lowers by one,
	// Final - Expected when positive.
	LostUpdates int64 `json:"lost_updates"`
	// StaleAccepted counts writes by a client that had lost the lock (or
	// wrote from a stale read) that the store applied.
	StaleAccepted int `json:"stale_writes_accepted"`
	// StaleRejected counts such writes the store refused, as Redis
	// answered them (not as the clients report them).
	StaleRejected int `json:"stale_writes_rejected"`
	// FencedOff is how many of StaleRejected the store refused for their
	// fencing token (a larger token had written); the others were refused
	// for their version.
	FencedOff int `json:"stale_writes_fenced,omitempty"`
	// Blocked is the total time clients spent waiting for a lock.
	Blocked time.Duration `json:"blocked_ns"`
}

// Result is one story run in one mode.
type Result struct {
	Story string `json:"story"`
	Mode  string `json:"mode"`
	// Clients are the lanes, in display order.
	Clients []string `json:"clients"`
	// Duration is how long the story ran (the timeline's extent).
	Duration time.Duration `json:"duration_ns"`
	Events   []Event       `json:"events"`
	Outcome  Outcome       `json:"outcome"`
	// Verdict is one line for the report, e.g. "lost 1 update: A's stale
	// write was accepted after B's".
	Verdict string `json:"verdict"`
	// Safe is true when no update was lost and no stale write accepted.
	Safe bool `json:"safe"`
	// Err is set when the run itself failed (a server could not be
	// reached); the other fields are then partial.
	Err string `json:"error,omitempty"`
}

// Skip is a mode left out of a run, and why.
type Skip struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason"`
}

// Info describes a story or a mode for the report.
type Info struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	About string `json:"about"`
}

// Report is every result of one `occbench story` run (stories.json) and
// the input of the HTML page (stories.html).
type Report struct {
	Started time.Time `json:"started"`
	// Servers names what the stories ran against, e.g. "Redis 7.0.15".
	Servers []string `json:"servers"`
	Stories []Info   `json:"stories"`
	Modes   []Info   `json:"modes"`
	Results []Result `json:"results"`
	// Skipped are the modes that did not run because a server they need
	// is not installed or cannot be reached here, with the reason.
	Skipped []Skip `json:"skipped,omitempty"`
	// Command reproduces the run.
	Command string `json:"command"`
}
