"""spark_hvd placeholder"""
