"""What a section's work across nodes brings onto each node, below the sections and the
fleet alike: the rank host (``rank_host``), the node's own daemon a drill may kill
(``node_daemon``), its network links a drill may cut or slow (``node_link``), and which
devices a unit was given and saw (``devices``). The fleet's engines place these hosts;
the bench and the drill drive them; neither imports the other through here."""
