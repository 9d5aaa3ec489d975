package bus

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbus/agentbus/pkg/subject"
)

// UsageDayMargin is how much longer than the longest retention of what it counts a day's usage
// counter is kept: the day itself (its last write may come at its end) and a day for writes
// counted late.
const UsageDayMargin = 48 * time.Hour

// UsageMaxAge is the max age of the daily usage counters (subject.UsageStream): the longest
// retention of what they count (history and files, claims) and UsageDayMargin.
func (c Config) UsageMaxAge() time.Duration {
	c = c.withDefaults()
	return max(c.HistoryMaxAge, c.InboxMaxAge) + UsageDayMargin
}

// ensureUsage creates or updates the two counter streams of package usage: the bytes stored per
// tenant, kind and day, and the totals that do not age out (instances). Each subject keeps its
// last value only, which is the counter's.
func ensureUsage(ctx context.Context, js jetstream.JetStream, cfg Config) (days, totals jetstream.Stream, err error) {
	days, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:              subject.UsageStream,
		Description:       "agentbus bytes stored per tenant, kind and day (counters)",
		Subjects:          []string{subject.UsageDaySubjects()},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		MaxAge:            cfg.UsageMaxAge(),
		MaxMsgsPerSubject: 1,
		AllowMsgCounter:   true,
		// A flush sent again after its acknowledgement was lost is not counted twice.
		Duplicates:  2 * time.Minute,
		AllowDirect: true,
	})
	if err != nil {
		return nil, nil, err
	}
	totals, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:              subject.UsageTotalsStream,
		Description:       "agentbus workflow instances per tenant (counters)",
		Subjects:          []string{subject.UsageTotalSubjects()},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		MaxMsgsPerSubject: 1,
		AllowMsgCounter:   true,
		Duplicates:        2 * time.Minute,
		AllowDirect:       true,
	})
	return days, totals, err
}

// RecordBytes is what JetStream's file store counts for a message of subj with a header block
// of hdrLen bytes (HeaderBytes) and data: the subject, headers and data, and 30 bytes of its
// record (lengths, sequence, time and checksum; 4 more with headers). Summed over a stream's
// messages it is the stream's bytes.
func RecordBytes(subj string, hdrLen, dataLen int) int64 {
	n := 22 + len(subj) + dataLen + 8
	if hdrLen > 0 {
		n += 4 + hdrLen
	}
	return int64(n)
}

// HeaderBytes is the length of h on the wire, as nats.go sends it and JetStream stores it; 0
// for no headers.
func HeaderBytes(h nats.Header) int { return headerBytes(h, nil) }

// KVRecordBytes is what a value of a key written by Create or Update, expecting the key's last
// revision to be last (0 for none), takes in its bucket's stream (RecordBytes): the key's
// subject, the header of the expected revision, and the value.
func KVRecordBytes(bucket, key string, value []byte, last uint64) int64 {
	hdr := len("NATS/1.0\r\n") + len(jetstream.ExpectedLastSubjSeqHeader) + len(": ") +
		len(strconv.FormatUint(last, 10)) + len("\r\n") + len("\r\n")
	return RecordBytes(subject.KVKeyPrefix(bucket)+key, hdr, len(value))
}

// Stored is what a message takes in its stream and when it was stored: what removing it takes
// off its tenant's usage (package usage counts a day's bytes under the day they were stored).
type Stored struct {
	Bytes int64
	At    time.Time
}

// StoredBytes is what a message read from its stream (jetstream.Stream.GetMsg) takes there
// (RecordBytes). The headers that a direct get adds to its answer (the stream, subject,
// sequence and time of the message) are not stored with the message, and are not counted.
func StoredBytes(raw *jetstream.RawStreamMsg) int64 {
	return RecordBytes(raw.Subject, headerBytes(raw.Header, directGetHeaders), len(raw.Data))
}

// directGetHeaders are the headers the server adds to a direct get's answer.
var directGetHeaders = map[string]bool{
	jetstream.StreamHeader: true, jetstream.SubjectHeader: true, jetstream.SequenceHeader: true,
	jetstream.TimeStampHeaer: true, "Nats-Num-Pending": true, jetstream.LastSequenceHeader: true,
}

// headerBytes is HeaderBytes of h without the headers named in skip.
func headerBytes(h nats.Header, skip map[string]bool) int {
	n := 0
	for k, vs := range h {
		if skip[k] {
			continue
		}
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	if n == 0 {
		return 0
	}
	return n + len("NATS/1.0\r\n") + len("\r\n")
}

// objectChunkSubjectBytes is the length of an object's chunk subject beyond its bucket's name:
// "$O.", ".C." and a NUID of 22 characters.
const objectChunkSubjectBytes = 3 + 3 + 22

// objectMetaHeader is the header block of an object's meta message (a roll-up of its subject).
var objectMetaHeader = nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}

// ObjectBytes is what an object the store's Put described with info takes in its stream: its
// chunks (the content, at most 128 KiB each, on the object's chunk subject) and its meta message
// (the info as JSON, on the name's meta subject), each counted as RecordBytes counts a message.
func ObjectBytes(info *jetstream.ObjectInfo) int64 {
	if info == nil {
		return 0
	}
	chunkSubj := 22 + len(info.Bucket) + objectChunkSubjectBytes + 8
	n := int64(info.Size) + int64(info.Chunks)*int64(chunkSubj)
	// Put publishes the info before it sets the time.
	published := *info
	published.ModTime = time.Time{}
	meta, err := json.Marshal(&published)
	if err != nil {
		return n
	}
	metaSubj := "$O." + info.Bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(info.Name))
	return n + RecordBytes(metaSubj, HeaderBytes(objectMetaHeader), len(meta))
}
