"""Result rows: built from what a cell measured (:mod:`.build`), server
figures lifted into them (:mod:`.serving`), and a saved run's rows and
steps checked against the schema when read back (:mod:`.shape`)."""
