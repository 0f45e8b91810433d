/**
 * Where deliveries may connect (SSRF protection). Loopback, private, link-local (which holds the
 * cloud metadata address 169.254.169.254), carrier-grade NAT, multicast and reserved addresses are
 * refused unless WEBHOOK_ALLOW_ADDRESSES allows them. The check is made on the addresses a name
 * resolves to when the connection is made (a `lookup` of the request: a DNS answer that changes
 * between a check and the connection — DNS rebinding — cannot slip through), and on literal
 * addresses before connecting and when an endpoint is created.
 */
import dns from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

const REFUSED = new BlockList();
for (const [addr, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  REFUSED.addSubnet(addr, bits, 'ipv4');
}
for (const [addr, bits] of [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b::', 96],
  ['64:ff9b:1::', 48],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  REFUSED.addSubnet(addr, bits, 'ipv6');
}

/** The code of the error a refused address gives (the attempt's error names it). */
export const ADDRESS_REFUSED = 'ERR_WEBHOOK_ADDRESS_REFUSED';

export class AddressGuard {
  constructor(private readonly allowed: BlockList) {}

  /** Why `address` (an IP literal) is refused, or null when deliveries may connect to it. */
  refusal(address: string): string | null {
    let addr = address.startsWith('[') ? address.slice(1, -1) : address;
    // An IPv4-mapped IPv6 address reaches the IPv4 one.
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(addr);
    if (mapped) addr = mapped[1];
    const family = isIP(addr);
    if (family === 0) return `${address} is not an IP address`;
    const type = family === 6 ? 'ipv6' : 'ipv4';
    if (this.allowed.check(addr, type)) return null;
    if (REFUSED.check(addr, type)) {
      return `${addr}, a loopback, private, link-local or reserved address (allow it with WEBHOOK_ALLOW_ADDRESSES)`;
    }
    return null;
  }

  /** A `lookup` for the request: resolves, then refuses the connection if any address is refused. */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 0);
      const refused = addresses.map((a) => this.refusal(a.address)).find((r) => r !== null);
      if (refused || addresses.length === 0) {
        const e = Object.assign(
          new Error(`refused to connect: ${hostname} resolves to ${refused ?? 'no address'}`),
          { code: ADDRESS_REFUSED },
        );
        return callback(e, '', 0);
      }
      if ((options as { all?: boolean }).all) {
        (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, addresses);
      } else {
        callback(null, addresses[0].address, addresses[0].family);
      }
    });
  };
}
