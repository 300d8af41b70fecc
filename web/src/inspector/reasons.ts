// MQTT 5 reason codes as the Inspector shows them: "0x87 Not authorized".
// Codes below 0x80 mean different things in different packets (0x00 is
// "Granted QoS 0" in a SUBACK and "Normal disconnection" in a DISCONNECT),
// so the packet is part of the question.

export type ReasonPacket = 'connack' | 'puback' | 'suback' | 'unsuback' | 'disconnect' | 'auth';

const failures: Record<number, string> = {
  0x80: 'Unspecified error',
  0x81: 'Malformed Packet',
  0x82: 'Protocol Error',
  0x83: 'Implementation specific error',
  0x84: 'Unsupported Protocol Version',
  0x85: 'Client Identifier not valid',
  0x86: 'Bad User Name or Password',
  0x87: 'Not authorized',
  0x88: 'Server unavailable',
  0x89: 'Server busy',
  0x8a: 'Banned',
  0x8b: 'Server shutting down',
  0x8c: 'Bad authentication method',
  0x8d: 'Keep Alive timeout',
  0x8e: 'Session taken over',
  0x8f: 'Topic Filter invalid',
  0x90: 'Topic Name invalid',
  0x91: 'Packet Identifier in use',
  0x92: 'Packet Identifier not found',
  0x93: 'Receive Maximum exceeded',
  0x94: 'Topic Alias invalid',
  0x95: 'Packet too large',
  0x96: 'Message rate too high',
  0x97: 'Quota exceeded',
  0x98: 'Administrative action',
  0x99: 'Payload format invalid',
  0x9a: 'Retain not supported',
  0x9b: 'QoS not supported',
  0x9c: 'Use another server',
  0x9d: 'Server moved',
  0x9e: 'Shared Subscriptions not supported',
  0x9f: 'Connection rate exceeded',
  0xa0: 'Maximum connect time',
  0xa1: 'Subscription Identifiers not supported',
  0xa2: 'Wildcard Subscriptions not supported',
};

function successName(code: number, packet: ReasonPacket): string | undefined {
  switch (code) {
    case 0x00:
      return packet === 'suback' ? 'Granted QoS 0' : packet === 'disconnect' ? 'Normal disconnection' : 'Success';
    case 0x01:
      return packet === 'suback' ? 'Granted QoS 1' : undefined;
    case 0x02:
      return packet === 'suback' ? 'Granted QoS 2' : undefined;
    case 0x04:
      return packet === 'disconnect' ? 'Disconnect with Will Message' : undefined;
    case 0x10:
      return packet === 'puback' ? 'No matching subscribers' : undefined;
    case 0x11:
      return packet === 'unsuback' ? 'No subscription existed' : undefined;
    case 0x18:
      return 'Continue authentication';
    case 0x19:
      return 'Re-authenticate';
  }
  return undefined;
}

/** The reason code's name from the MQTT 5 specification, or "Unknown reason code". */
export function reasonName(code: number, packet: ReasonPacket): string {
  return (code >= 0x80 ? failures[code] : successName(code, packet)) ?? 'Unknown reason code';
}

/** "0x87 Not authorized". */
export function reasonLabel(code: number, packet: ReasonPacket): string {
  return `${hex(code)} ${reasonName(code, packet)}`;
}

export function hex(code: number): string {
  return '0x' + code.toString(16).toUpperCase().padStart(2, '0');
}

/** What a DISCONNECT from Berth usually means for the Inspector, when it says more than the name. */
export function berthHint(code: number): string {
  switch (code) {
    case 0x87:
      return 'the inspector credential was revoked or its token refused';
    case 0x8e:
      return 'another connection took over this client id';
    case 0x96:
    case 0x97:
      return "the tenant's quota was exceeded";
    case 0x98:
      return 'an operator ended the connection (for example from the Clients page)';
    case 0x9c:
      return 'the tenant moved to another node; connect again';
    case 0xa0:
      return 'the inspector token expired';
  }
  return '';
}
