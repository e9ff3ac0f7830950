#!/usr/bin/env python3
"""Wrap one direction's FPDU octets, after an MPA start-up exchange, in a
hand-made TCP/IPv4 pcap for tshark.
  rev0:     a Rev 0 MPA Request and Reply (RFC 5044 Appendix C)
  startkey: a draft-03 Start Key each way (seed 000 §8.1, Initiator first)
usage: startup_pcap.py rev0|startkey FPDU_STREAM OUT.pcap"""
import struct, sys
def csum(b):
    if len(b)%2: b+=b'\0'
    s=sum(struct.unpack('!%dH'%(len(b)//2),b)); s=(s>>16)+(s&0xffff); s+=s>>16; return (~s)&0xffff
def pkt(src,dst,sp,dp,seq,ack,flags,data):
    tcp=struct.pack('!HHIIBBHHH',sp,dp,seq,ack,5<<4,flags,65535,0,0)+data
    ph=struct.pack('!4s4sBBH',bytes(src),bytes(dst),0,6,len(tcp))
    c=csum(ph+tcp); tcp=tcp[:16]+struct.pack('!H',c)+tcp[18:]
    ip=struct.pack('!BBHHHBBH4s4s',0x45,0,20+len(tcp),1,0,64,6,0,bytes(src),bytes(dst))
    ip=ip[:10]+struct.pack('!H',csum(ip))+ip[12:]
    return b'\0'*12+b'\x08\x00'+ip+tcp
A=[10,0,0,1];B=[10,0,0,2]
if sys.argv[1]=='rev0':
    req=b'MPA ID Req Frame'+bytes([0xc0,0,0,0]); rep=b'MPA ID Rep Frame'+bytes([0xc0,0,0,0])
else:
    req=b'MPA ident frame'+bytes([0xc0]); rep=b'MPA ident frame'+bytes([0xc0])
f5=open(sys.argv[2],'rb').read()
a1=1001+len(req); b1=5001+len(rep)
ps=[pkt(A,B,40000,50001,1000,0,0x02,b''),pkt(B,A,50001,40000,5000,1001,0x12,b''),pkt(A,B,40000,50001,1001,5001,0x10,b''),
    pkt(A,B,40000,50001,1001,5001,0x18,req),pkt(B,A,50001,40000,5001,a1,0x18,rep),pkt(A,B,40000,50001,a1,b1,0x18,f5)]
out=struct.pack('<IHHiIII',0xa1b2c3d4,2,4,0,0,65535,1)
for i,p in enumerate(ps): out+=struct.pack('<IIII',1,i,len(p),len(p))+p
open(sys.argv[3],'wb').write(out)
