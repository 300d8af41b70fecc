package synfilter

import (
	"github.com/cilium/ebpf/asm"
)

// Stack layout of the program, offsets from the frame pointer (R10).
const (
	stKey    = -16 // [16]byte bucket key
	stValue  = -24 // u64 new bucket value
	stZero   = -32 // u32 0, the dropped counter's index
	stHdr    = -72 // [40]byte IP header copy (IPv6's fixed header)
	stFlags  = -80 // u8 TCP flags
	hdrStart = 1   // BPF_HDR_START_NET
)

// TCP flags and protocol numbers.
const (
	tcpFIN, tcpSYN, tcpRST, tcpACK = 0x01, 0x02, 0x04, 0x10
	protoTCP                       = 6
)

// program returns the filter's instructions for buckets and dropped (map
// file descriptors), refilling one token every interval ns, holding at
// most burst. See doc.go for what it does.
func program(buckets, dropped int, interval, burst uint64) asm.Instructions {
	// loadNet copies size bytes at the network header's off (in R2 when
	// offReg) to the stack at dst; R0 is 0 on success.
	loadNet := func(dst int32, size int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, dst),
			asm.Mov.Imm(asm.R4, size),
			asm.Mov.Imm(asm.R5, hdrStart),
			asm.FnSkbLoadBytesRelative.Call(),
		}
	}
	var p asm.Instructions
	add := func(ins ...asm.Instruction) { p = append(p, ins...) }
	addAll := func(ins asm.Instructions) { p = append(p, ins...) }

	add(asm.Mov.Reg(asm.R6, asm.R1)) // R6: the skb
	// The IP version: the first byte's high nibble.
	add(asm.Mov.Imm(asm.R2, 0))
	addAll(loadNet(stHdr, 1))
	add(
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R7, asm.RFP, stHdr, asm.Byte),
		asm.RSh.Imm(asm.R7, 4),
		asm.JEq.Imm(asm.R7, 4, "v4"),
		asm.JEq.Imm(asm.R7, 6, "v6"),
		asm.Ja.Label("pass"),
	)

	// IPv4: the 20-byte header; the key is ::ffff:src; R7 = header length.
	add(asm.Mov.Imm(asm.R2, 0).WithSymbol("v4"))
	addAll(loadNet(stHdr, 20))
	add(
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.RFP, stHdr+9, asm.Byte), // protocol
		asm.JNE.Imm(asm.R1, protoTCP, "pass"),
		asm.LoadMem(asm.R7, asm.RFP, stHdr, asm.Byte),
		asm.And.Imm(asm.R7, 0x0f),
		asm.LSh.Imm(asm.R7, 2), // IHL × 4
		asm.Mov.Imm(asm.R1, 0), // (no 8-byte store of an immediate)
		asm.StoreMem(asm.RFP, stKey, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, stKey+8, asm.R1, asm.DWord),
		asm.StoreImm(asm.RFP, stKey+10, 0xffff, asm.Half),
		asm.LoadMem(asm.R1, asm.RFP, stHdr+12, asm.Word), // source address
		asm.StoreMem(asm.RFP, stKey+12, asm.R1, asm.Word),
		asm.Ja.Label("flags"),
	)

	// IPv6: the fixed 40-byte header; TCP right after it (extension
	// headers pass unfiltered); the key is the source's /64.
	add(asm.Mov.Imm(asm.R2, 0).WithSymbol("v6"))
	addAll(loadNet(stHdr, 40))
	add(
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.RFP, stHdr+6, asm.Byte), // next header
		asm.JNE.Imm(asm.R1, protoTCP, "pass"),
		asm.Mov.Imm(asm.R7, 40),
		asm.LoadMem(asm.R1, asm.RFP, stHdr+8, asm.DWord), // source address, first 8 bytes
		asm.StoreMem(asm.RFP, stKey, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, stKey+8, asm.R1, asm.DWord),
	)

	// The TCP flags, at byte 13 of the TCP header: only a bare SYN goes on.
	add(asm.Mov.Reg(asm.R2, asm.R7).WithSymbol("flags"))
	add(asm.Add.Imm(asm.R2, 13))
	addAll(loadNet(stFlags, 1))
	add(
		asm.JNE.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.RFP, stFlags, asm.Byte),
		asm.And.Imm(asm.R1, tcpFIN|tcpSYN|tcpRST|tcpACK),
		asm.JNE.Imm(asm.R1, tcpSYN, "pass"),

		// R8 = now; R0 = the source's bucket.
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.LoadMapPtr(asm.R1, buckets),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "new"),

		// next = max(tat, now) + interval; over burst × interval → drop.
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.LoadMem(asm.R1, asm.R9, 0, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R8, "later"),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.LoadImm(asm.R2, int64(interval), asm.DWord).WithSymbol("later"),
		asm.Add.Reg(asm.R1, asm.R2),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.Sub.Reg(asm.R2, asm.R8),
		asm.LoadImm(asm.R3, int64(burst*interval), asm.DWord),
		asm.JGT.Reg(asm.R2, asm.R3, "drop"),
		asm.StoreMem(asm.R9, 0, asm.R1, asm.DWord),
		asm.Ja.Label("pass"),

		// A source not seen yet (or evicted): a full bucket, one taken.
		asm.LoadImm(asm.R1, int64(interval), asm.DWord).WithSymbol("new"),
		asm.Add.Reg(asm.R1, asm.R8),
		asm.StoreMem(asm.RFP, stValue, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, buckets),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stValue),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		asm.Ja.Label("pass"),

		// Drop, counted.
		asm.StoreImm(asm.RFP, stZero, 0, asm.Word).WithSymbol("drop"),
		asm.LoadMapPtr(asm.R1, dropped),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stZero),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "dropped"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("dropped"),
		asm.Return(),

		// Pass the whole segment: the return value is the length kept.
		asm.Mov.Imm32(asm.R0, -1).WithSymbol("pass"),
		asm.Return(),
	)
	return p
}
