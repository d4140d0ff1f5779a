//go:build ignore

// netdelay holds each packet of a netfilter queue for a random delay, then
// lets it go: `tc qdisc ... netem delay D J` for kernels built without
// netem (sch_netem), such as the test machines' (scripts/test-netfaults.sh).
// Each packet waits D ± J (uniform, as netem's default), independently, so
// packets can overtake each other as with netem's jitter. Point packets at
// the queue with iptables, with --queue-bypass so that they pass when this
// program is not running:
//
//	iptables -A OUTPUT -o veth0 -j NFQUEUE --queue-num 7 --queue-bypass
//	go run scripts/netdelay.go -queue 7 -delay 100ms -jitter 50ms
//
// It speaks nfnetlink_queue (linux/netfilter/nfnetlink_queue.h) with the
// syscall package only, asking for the packets' metadata, not their bytes.
// It runs until SIGTERM or SIGINT.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

const (
	netlinkNetfilter = 12  // NETLINK_NETFILTER
	subsysQueue      = 3   // NFNL_SUBSYS_QUEUE
	msgPacket        = 0   // NFQNL_MSG_PACKET
	msgVerdict       = 1   // NFQNL_MSG_VERDICT
	msgConfig        = 2   // NFQNL_MSG_CONFIG
	cfgCmd           = 1   // NFQA_CFG_CMD
	cfgParams        = 2   // NFQA_CFG_PARAMS
	cmdBind          = 1   // NFQNL_CFG_CMD_BIND
	copyMeta         = 1   // NFQNL_COPY_META
	attrPacketHdr    = 1   // NFQA_PACKET_HDR
	attrVerdictHdr   = 2   // NFQA_VERDICT_HDR
	nfAccept         = 1   // NF_ACCEPT
	noENOBUFS        = 5   // NETLINK_NO_ENOBUFS
	solNetlink       = 270 // SOL_NETLINK
)

func main() {
	queue := flag.Int("queue", 0, "the NFQUEUE number")
	delay := flag.Duration("delay", 100*time.Millisecond, "mean delay of each packet")
	jitter := flag.Duration("jitter", 50*time.Millisecond, "each packet's delay is uniform in delay ± jitter")
	flag.Parse()
	if *queue < 0 || *queue > 65535 || *delay < 0 || *jitter < 0 || *jitter > *delay {
		fmt.Fprintln(os.Stderr, "netdelay: want 0 <= queue <= 65535 and 0 <= jitter <= delay")
		os.Exit(2)
	}
	if err := run(uint16(*queue), *delay, *jitter); err != nil {
		fmt.Fprintln(os.Stderr, "netdelay:", err)
		os.Exit(1)
	}
}

// sock is the netlink socket; verdicts come from the timers' goroutines.
type sock struct {
	mu sync.Mutex
	fd int
}

func (s *sock) send(msgType uint16, flags uint16, queue uint16, attrs ...[]byte) error {
	body := []byte{syscall.AF_UNSPEC, 0, byte(queue >> 8), byte(queue)} // nfgenmsg, res_id big-endian
	for _, a := range attrs {
		body = append(body, a...)
	}
	msg := make([]byte, 16, 16+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(16+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], subsysQueue<<8|msgType)
	binary.NativeEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST|flags)
	msg = append(msg, body...)
	s.mu.Lock()
	defer s.mu.Unlock()
	return syscall.Sendto(s.fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
}

// attr is one netlink attribute, padded to 4 bytes.
func attr(typ uint16, payload []byte) []byte {
	a := make([]byte, 4, 4+len(payload)+3)
	binary.NativeEndian.PutUint16(a[0:], uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(a[2:], typ)
	a = append(a, payload...)
	for len(a)%4 != 0 {
		a = append(a, 0)
	}
	return a
}

func run(queue uint16, delay, jitter time.Duration) error {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW, netlinkNetfilter)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	syscall.SetsockoptInt(fd, solNetlink, noENOBUFS, 1)
	s := &sock{fd: fd}
	// Bind the queue (for IPv4) and ask for the metadata only.
	if err := s.send(msgConfig, syscall.NLM_F_ACK, queue, attr(cfgCmd, []byte{cmdBind, 0, 0, syscall.AF_INET})); err != nil {
		return fmt.Errorf("binding queue %d: %w", queue, err)
	}
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0)
	params[4] = copyMeta
	if err := s.send(msgConfig, syscall.NLM_F_ACK, queue, attr(cfgParams, params)); err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; os.Exit(0) }()
	fmt.Printf("netdelay: queue %d, each packet held %s ± %s\n", queue, delay, jitter)

	buf := make([]byte, 1<<16)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOBUFS) {
			continue
		}
		if err != nil {
			return err
		}
		for b := buf[:n]; len(b) >= 16; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			typ := binary.NativeEndian.Uint16(b[4:])
			if l < 16 || l > len(b) {
				break
			}
			msg := b[16:l]
			b = b[min((l+3)&^3, len(b)):]
			switch {
			case typ == syscall.NLMSG_ERROR:
				if code := int32(binary.NativeEndian.Uint32(msg)); code != 0 {
					return fmt.Errorf("netlink: %w (is the queue taken, or nfnetlink_queue missing?)", syscall.Errno(-code))
				}
			case typ == subsysQueue<<8|msgPacket && len(msg) >= 4:
				id, ok := packetID(msg[4:])
				if !ok {
					continue
				}
				d := delay + time.Duration((rand.Float64()*2-1)*float64(jitter))
				time.AfterFunc(d, func() {
					v := make([]byte, 8)
					binary.BigEndian.PutUint32(v[0:], nfAccept)
					binary.BigEndian.PutUint32(v[4:], id)
					if err := s.send(msgVerdict, 0, queue, attr(attrVerdictHdr, v)); err != nil {
						fmt.Fprintln(os.Stderr, "netdelay: verdict:", err)
					}
				})
			}
		}
	}
}

// packetID finds NFQA_PACKET_HDR's packet id among a packet message's
// attributes.
func packetID(b []byte) (uint32, bool) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff // without NLA_F_NESTED, NLA_F_NET_BYTEORDER
		if l < 4 || l > len(b) {
			return 0, false
		}
		if typ == attrPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(b[4:8]), true
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return 0, false
}
