"""InfiniBand's own tools and tables: ``perfquery`` and ``ibnetdiscover`` output, and the IBA
Performance Management counter names and widths that every IB source (UFM, perfquery, sysfs)
reads through."""
