"""The OIDs the SNMP collector walks, with the MIB each comes from.

Every OID here was checked against the MIB module text (IF-MIB: RFC 2863; ARISTA-PFC-MIB,
CISCO-PFC-EXT-MIB and IEEE8021-PFC-MIB: their published modules; LLDP-MIB: IEEE 802.1AB-2005).
Tables are walked column by column, so only columns are listed; the instance suffix is the
table index.
"""

from __future__ import annotations

Oid = tuple[int, ...]


def oid(text: str) -> Oid:
    """``"1.3.6.1"`` -> ``(1, 3, 6, 1)``."""
    return tuple(int(x) for x in text.strip(".").split("."))


def oid_text(value: Oid) -> str:
    return ".".join(map(str, value))


# SNMPv2-MIB system group (scalars, instance .0)
SYS_DESCR = oid("1.3.6.1.2.1.1.1")
SYS_OBJECT_ID = oid("1.3.6.1.2.1.1.2")
SYS_UPTIME = oid("1.3.6.1.2.1.1.3")
SYS_NAME = oid("1.3.6.1.2.1.1.5")
IF_NUMBER = oid("1.3.6.1.2.1.2.1")

# IF-MIB ifTable (1.3.6.1.2.1.2.2.1.<column>.<ifIndex>)
IF_ENTRY = oid("1.3.6.1.2.1.2.2.1")
IF_INDEX = (*IF_ENTRY, 1)
IF_DESCR = (*IF_ENTRY, 2)
IF_TYPE = (*IF_ENTRY, 3)
IF_SPEED = (*IF_ENTRY, 5)  # Gauge32, bit/s; 4294967295 means "too fast, read ifHighSpeed"
IF_ADMIN_STATUS = (*IF_ENTRY, 7)
IF_OPER_STATUS = (*IF_ENTRY, 8)
IF_IN_OCTETS = (*IF_ENTRY, 10)  # Counter32
IF_IN_UCAST_PKTS = (*IF_ENTRY, 11)  # Counter32
IF_IN_DISCARDS = (*IF_ENTRY, 13)  # Counter32
IF_IN_ERRORS = (*IF_ENTRY, 14)  # Counter32
IF_OUT_OCTETS = (*IF_ENTRY, 16)  # Counter32
IF_OUT_UCAST_PKTS = (*IF_ENTRY, 17)  # Counter32
IF_OUT_DISCARDS = (*IF_ENTRY, 19)  # Counter32
IF_OUT_ERRORS = (*IF_ENTRY, 20)  # Counter32

# IF-MIB ifXTable (1.3.6.1.2.1.31.1.1.1.<column>.<ifIndex>)
IFX_ENTRY = oid("1.3.6.1.2.1.31.1.1.1")
IF_NAME = (*IFX_ENTRY, 1)
IF_HC_IN_OCTETS = (*IFX_ENTRY, 6)  # Counter64
IF_HC_IN_UCAST_PKTS = (*IFX_ENTRY, 7)  # Counter64
IF_HC_OUT_OCTETS = (*IFX_ENTRY, 10)  # Counter64
IF_HC_OUT_UCAST_PKTS = (*IFX_ENTRY, 11)  # Counter64
IF_HIGH_SPEED = (*IFX_ENTRY, 15)  # Gauge32, Mb/s; the configured speed while the port is down
IF_ALIAS = (*IFX_ENTRY, 18)

# ARISTA-PFC-MIB aristaPfcPriorityTable, index (aristaPfcIfIndex, aristaPfcPriorityIndex 0..7), Counter64.
ARISTA_PFC_ENTRY = oid("1.3.6.1.4.1.30065.3.11.1.1.1")
ARISTA_PFC_REQUESTS = (*ARISTA_PFC_ENTRY, 3)  # pause frames the port sent
ARISTA_PFC_INDICATIONS = (*ARISTA_PFC_ENTRY, 4)  # pause frames the port received

# CISCO-PFC-EXT-MIB cpfcIfPriorityTable, index (ifIndex, cpfcIfPriorityValue 0..7), Counter64.
CISCO_PFC_ENTRY = oid("1.3.6.1.4.1.9.9.813.1.2.1")
CISCO_PFC_REQUESTS = (*CISCO_PFC_ENTRY, 2)
CISCO_PFC_INDICATIONS = (*CISCO_PFC_ENTRY, 3)

# IEEE8021-PFC-MIB ieee8021PfcIfTable (augments ifEntry, index ifIndex), Counter32, per port:
# the standard MIB does not split PFC frames by priority.
IEEE_PFC_ENTRY = oid("1.3.111.2.802.1.1.21.1.1.1")
IEEE_PFC_REQUESTS = (*IEEE_PFC_ENTRY, 2)
IEEE_PFC_INDICATIONS = (*IEEE_PFC_ENTRY, 3)

# LLDP-MIB (IEEE 802.1AB-2005, lldpMIB 1.0.8802.1.1.2), the local system's scalars (instance .0).
LLDP_LOC = oid("1.0.8802.1.1.2.1.3")
LLDP_LOC_CHASSIS_ID_SUBTYPE = (*LLDP_LOC, 1)
LLDP_LOC_CHASSIS_ID = (*LLDP_LOC, 2)
LLDP_LOC_SYS_NAME = (*LLDP_LOC, 3)
# lldpLocPortTable, index lldpLocPortNum.
LLDP_LOC_PORT_ENTRY = (*LLDP_LOC, 7, 1)
LLDP_LOC_PORT_ID_SUBTYPE = (*LLDP_LOC_PORT_ENTRY, 2)
LLDP_LOC_PORT_ID = (*LLDP_LOC_PORT_ENTRY, 3)
LLDP_LOC_PORT_DESC = (*LLDP_LOC_PORT_ENTRY, 4)
# lldpRemTable, index (lldpRemTimeMark, lldpRemLocalPortNum, lldpRemIndex).
LLDP_REM_ENTRY = oid("1.0.8802.1.1.2.1.4.1.1")
LLDP_REM_CHASSIS_ID_SUBTYPE = (*LLDP_REM_ENTRY, 4)
LLDP_REM_CHASSIS_ID = (*LLDP_REM_ENTRY, 5)
LLDP_REM_PORT_ID_SUBTYPE = (*LLDP_REM_ENTRY, 6)
LLDP_REM_PORT_ID = (*LLDP_REM_ENTRY, 7)
LLDP_REM_PORT_DESC = (*LLDP_REM_ENTRY, 8)
LLDP_REM_SYS_NAME = (*LLDP_REM_ENTRY, 9)
# lldpRemManAddrTable, index (lldpRemTimeMark, lldpRemLocalPortNum, lldpRemIndex,
# lldpRemManAddrSubtype, lldpRemManAddr as length + octets): the address is in the index.
LLDP_REM_MAN_ADDR_ENTRY = oid("1.0.8802.1.1.2.1.4.2.1")
LLDP_REM_MAN_ADDR_IF_SUBTYPE = (*LLDP_REM_MAN_ADDR_ENTRY, 3)

#: ifOperStatus values (IF-MIB).
OPER_UP, OPER_DOWN, OPER_TESTING, OPER_UNKNOWN, OPER_DORMANT, OPER_NOT_PRESENT, OPER_LOWER_DOWN = range(1, 8)

#: ifSpeed saturates here for links faster than ~4.29 Gb/s; the real speed is in ifHighSpeed.
IF_SPEED_MAX = 2**32 - 1

#: ifType values (IANAifType-MIB) of physical Ethernet ports: ethernetCsmacd, fastEther,
#: fastEtherFX, gigabitEthernet. LAGs (161), VLAN interfaces (53, 135, 136) and loopbacks (24)
#: are not ports.
PHYSICAL_IF_TYPES = (6, 62, 69, 117)
